-- lib.lua: helpers that internal/script prepends to every dlock script.
-- KEYS: none. ARGV: none. Returns: nothing; it only defines local functions.

-- now_us returns the Redis server's clock in microseconds. Lua numbers are
-- doubles, exact for integers up to 2^53, which microseconds since 1970
-- stay below until the year 2255.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- int formats an integral Lua number without an exponent.
local function int(n)
  return string.format('%d', n)
end

-- issue_fence returns the next fence of a lock: max(last + 1, now), so
-- fences rise strictly even when the lock's keys have expired, as long as
-- the server clock does not step back. The last fence is kept only while
-- it can still be ahead of the clock, plus a minute against clock steps:
-- no key lives forever for a lock name.
local function issue_fence(fence_key, now)
  local last = tonumber(redis.call('GET', fence_key) or '0')
  local fence = math.max(last + 1, now)
  redis.call('SET', fence_key, int(fence), 'PX', math.ceil((fence - now) / 1000) + 60000)
  return fence
end

-- prune_waiters drops queued waiters whose liveness deadline (score in the
-- alive set, ms) has passed: a waiter that died is skipped after its
-- liveness timeout, not after a lock TTL. At most 100 per call, to bound
-- the script's run time; the rest go on the next call. An RWMutex's
-- readers are pruned with it too: their expiry set is the alive set.
local function prune_waiters(queue, alive, wmeta, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', now_ms, 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', queue, unpack(dead))
    redis.call('ZREM', alive, unpack(dead))
    redis.call('HDEL', wmeta, unpack(dead))
  end
end

-- expire_by_last gives each key in ... the expiry of the highest score of
-- the zset by, a deadline in server ms ('inf': never). The keys of a set of
-- leases (an RWMutex's readers) then live as long as its longest lease and
-- no longer, however the leases come and go.
local function expire_by_last(by, now_ms, ...)
  local last = redis.call('ZRANGE', by, -1, -1, 'WITHSCORES')[2]
  if not last then
    return
  end
  for _, k in ipairs({...}) do
    if last == 'inf' then
      redis.call('PERSIST', k)
    else
      redis.call('PEXPIRE', k, math.max(1, tonumber(last) - now_ms))
    end
  end
end
