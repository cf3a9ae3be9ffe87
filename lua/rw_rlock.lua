-- rw_rlock.lua: take a read share of an RWMutex if no writer holds it and,
-- when the caller gives way to writers, no writer's intention is alive.
-- KEYS[1]  the writer's owner key
-- KEYS[2]  the last fence
-- KEYS[3]  readers: zset token -> fence
-- KEYS[4]  reader expiries: zset token -> deadline (server ms; inf: never):
--          one ms past the floored clock's ms plus the TTL, and its keys
--          live one ms more than the TTL, so that a share lasts at least
--          its TTL (see deadline_of in lib/clock.lua)
-- KEYS[5]  reader details: hash token -> "<since ms>:<metadata>"
-- KEYS[6]  intentions: zset writer token -> deadline (server ms)
--          (on a single Redis only KEYS[1] is sent: see rw_lock.lua)
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
local ms = string.sub(clock, 1, -4) -- server ms, the clock's digits but the last three
local now_ms = tonumber(ms)
prune_waiters(KEYS[3], KEYS[4], KEYS[5], ms)
local mine = redis.call('ZSCORE', KEYS[3], tok)
if mine then
  -- A try sent again after its reply was lost: the caller counts the
  -- share's TTL from this try, so Redis must too; never less than it
  -- did (the first try may run after a Refresh made the share longer).
  local deadline, left = deadline_of(ARGV[2], now_ms)
  if left then
    redis.call('ZADD', KEYS[4], 'GT', deadline, tok)
    expire_by_last(KEYS[4], now_ms, deadline, left, KEYS[3], KEYS[4], KEYS[5])
  end
  return mine
end
local w, wfence = holder_of(redis.call('GET', KEYS[1]))
if w then
  return {0, redis.call('PTTL', KEYS[1]), wfence}
end
if ARGV[4] == '1' then
  -- The latest intention; the writers' tries clear out the dead ones.
  local last = redis.call('ZRANGE', KEYS[6], '-1', '-1', 'WITHSCORES')[2]
  if last and exceeds(last, ms) then
    -- A dead writer's intention stops readers until its deadline, no longer.
    local oldest = redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')[2]
    return {0, tonumber(last) - now_ms, tonumber(oldest or '0')}
  end
end
local fence = issue_fence(KEYS[2], clock)
local deadline, left = deadline_of(ARGV[2], now_ms)
redis.call('ZADD', KEYS[3], fence, tok)
redis.call('ZADD', KEYS[4], deadline, tok)
redis.call('HSET', KEYS[5], tok, ms .. ':' .. ARGV[3])
expire_by_last(KEYS[4], now_ms, deadline, left, KEYS[3], KEYS[4], KEYS[5])
return fence
