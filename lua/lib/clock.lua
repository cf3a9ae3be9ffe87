-- clock.lua: the server's clock, number formatting and fences, for every
-- family of scripts.

-- now_us returns the Redis server's clock in microseconds. Lua numbers are
-- doubles, exact for integers up to 2^53, which microseconds since 1970
-- stay below until the year 2255.
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

-- issue_fence returns the next fence of a lock, the same as a decimal
-- string, and int(now), and records the fence, so that fences rise
-- strictly even when the lock's keys have expired, as
-- long as the server clock does not step back by more than the minute
-- keep_fence allows. One command when the clock has passed the last
-- fence, as it nearly always has: the clock is written and the last fence
-- read at once. Both are decimals without leading zeros, so that case is
-- told by their lengths and a string comparison, with no number read back
-- (a tonumber costs Redis about what a command does). Lua compares
-- strings with strcoll, under the locale Redis sets; every locale orders
-- the digits 0 to 9 as numbers, which is all equal lengths need.
local function issue_fence(fence_key, now)
  local clock = int(now)
  local last = redis.call('SET', fence_key, clock, 'PX', '60000', 'GET')
  if not last or #last < #clock or (#last == #clock and last < clock) then
    return now, clock, clock
  end
  local fence = tonumber(last) + 1
  return fence, keep_fence(fence_key, fence, now), clock
end
