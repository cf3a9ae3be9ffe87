-- rw_rlock.lua: take a read share of an RWMutex if no writer holds it and,
-- when the caller gives way to writers, no writer's intention is alive.
-- KEYS[1]  the writer's owner key
-- KEYS[2]  the last fence
-- KEYS[3]  readers: zset token -> fence
-- KEYS[4]  reader expiries: zset token -> deadline (server ms; inf: never)
-- KEYS[5]  reader details: hash token -> "<since ms>:<metadata>"
-- KEYS[6]  intentions: zset writer token -> deadline (server ms)
-- ARGV[1]  token of the new share
-- ARGV[2]  TTL in ms; 0 = the share never expires
-- ARGV[3]  metadata shown by Status
-- ARGV[4]  1 to wait while a writer's intention lives (PreferWriters), 0 not to
-- Returns  the fence (> 0), bare, as a decimal string, when taken (also
--          when this token already has a share: a try may be sent again
--          after a lost reply; the share's TTL then starts anew);
--          {0, ms until it is worth trying again unasked (-1: only when
--           woken), holder: the writer's fence (a decimal string); when
--           only intentions stop the caller, the oldest reader's fence or
--           0}.
local tok = ARGV[1]
local clock = clock_us()
local now = tonumber(clock)
local now_ms = math.floor(now / 1000)
prune_waiters(KEYS[3], KEYS[4], KEYS[5], now_ms)
local mine = redis.call('ZSCORE', KEYS[3], tok)
if mine then
  -- A try sent again after its reply was lost: the caller counts the
  -- share's TTL from this try, so Redis must too; never less than it
  -- did (the first try may run after a Refresh made the share longer).
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then
    redis.call('ZADD', KEYS[4], 'GT', int(now_ms + ttl), tok)
    expire_by_last(KEYS[4], now_ms, KEYS[3], KEYS[4], KEYS[5])
  end
  return mine
end
local w, wfence = holder_of(redis.call('GET', KEYS[1]))
if w then
  return {0, redis.call('PTTL', KEYS[1]), wfence}
end
if ARGV[4] == '1' then
  -- The latest intention; the writers' tries clear out the dead ones.
  local last = tonumber(redis.call('ZRANGE', KEYS[6], '-1', '-1', 'WITHSCORES')[2] or '0')
  if last > now_ms then
    -- A dead writer's intention stops readers until its deadline, no longer.
    local oldest = redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')[2]
    return {0, last - now_ms, tonumber(oldest or '0')}
  end
end
local fence = issue_fence(KEYS[2], clock)
local ttl = tonumber(ARGV[2])
local deadline = 'inf'
if ttl > 0 then
  deadline = int(now_ms + ttl)
end
redis.call('ZADD', KEYS[3], fence, tok)
redis.call('ZADD', KEYS[4], deadline, tok)
-- (The ms of now are the clock's digits but the last three.)
redis.call('HSET', KEYS[5], tok, string.sub(clock, 1, -4) .. ':' .. ARGV[3])
expire_by_last(KEYS[4], now_ms, KEYS[3], KEYS[4], KEYS[5])
return fence
