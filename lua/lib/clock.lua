-- clock.lua: the server's clock, number formatting and fences, for every
-- family of scripts.

-- clock_us returns the Redis server's clock in microseconds as a decimal
-- string without leading zeros, joined from TIME's seconds and its
-- microseconds padded to six digits: no number is read or printed (each
-- tonumber or string.format costs Redis about what a command does). Its
-- milliseconds are string.sub(clock, 1, -4), its digits but the last
-- three: scripts write that where they need it, since a helper would
-- cost each run a closure and a call, more than the string.sub.
local function clock_us()
  local t = redis.call('TIME')
  return t[1] .. string.sub('00000' .. t[2], -6)
end

-- now_us returns the Redis server's clock in microseconds, a number. (A
-- script that needs the string too reads tonumber(clock_us()), which
-- costs less than int(now_us()).) Lua numbers are doubles, exact for
-- integers up to 2^53, which microseconds since 1970 stay below until the
-- year 2255.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- time_ms returns the Redis server's clock in whole milliseconds.
local function time_ms()
  return math.floor(now_us() / 1000)
end

-- int formats an integral Lua number without an exponent.
local function int(n)
  return string.format('%d', n)
end

-- deadline_of is the deadline, in server ms, of a lease kept as a score
-- in a zset (a read share, a Semaphore lease) for a TTL of ttl ms (a
-- decimal string, as the caller sent it; '0': never, 'inf') from now_ms
-- (a number), and the TTL its keys take (a decimal string; false: none).
-- A lease is over once the server's ms reach its deadline, and now_ms is
-- the clock's ms floored: so the deadline is one ms past now_ms + ttl, or
-- a lease taken at X.999 ms would end a µs after X + ttl, before its
-- holder's count of ttl from its request's send time. Its keys live a ms
-- more than ttl too: a PEXPIRE of ttl ms may end them within ttl of the
-- script's run (Redis counts it from a ms of its clock, floored, and may
-- find it past at once), which a 1ms TTL showed.
local function deadline_of(ttl, now_ms)
  if ttl ~= '0' then
    local ms = tonumber(ttl) + 1
    return int(now_ms + ms), int(ms)
  end
  return 'inf', false
end

-- exceeds reports whether a, a decimal string of an integer without
-- leading zeros, is greater than b, another such string (nil or false:
-- none, which every a exceeds). It reads no number: the longer is
-- greater, and strings of one length compare as their numbers. (Lua
-- compares strings with strcoll, under the locale Redis sets; every
-- locale orders the digits 0 to 9 as numbers, which is all equal lengths
-- need.)
local function exceeds(a, b)
  return not b or #a > #b or (#a == #b and a > b)
end

-- next_fence is the fence, or queue order, that follows last at server
-- time now (µs): max(last + 1, now). It rises strictly while last is
-- known, and with the clock when it is not.
local function next_fence(last, now)
  return math.max(last + 1, now)
end

-- keep_fence records fence as a lock's last fence, and returns it as a
-- decimal string. It is kept only while it can still be ahead of the
-- clock, plus a minute against clock steps: no key lives forever for a
-- lock name.
local function keep_fence(fence_key, fence, now)
  local f = int(fence)
  redis.call('SET', fence_key, f, 'PX', int(math.max(1, math.ceil((fence - now) / 1000) + 60000)))
  return f
end

-- issue_fence returns the next fence of a lock as a decimal string, given
-- the server's clock (µs, a decimal string: see clock_us), and records
-- it, so that fences rise strictly even when the lock's keys have
-- expired, as long as the server clock does not step back by more than
-- the minute keep_fence allows. The fence is max(last + 1, clock). One
-- command when the clock has passed the last fence, as it nearly always
-- has: the clock is written and the last fence read at once, and the
-- fence is the clock, told with no number read back: exceeds(clock,
-- last), written out, because every lock's take runs it and a helper more
-- costs each run a closure and a call.
local function issue_fence(fence_key, clock)
  local last = redis.call('SET', fence_key, clock, 'PX', '60000', 'GET')
  if not last or #clock > #last or (#clock == #last and clock > last) then
    return clock
  end
  return keep_fence(fence_key, tonumber(last) + 1, tonumber(clock))
end
