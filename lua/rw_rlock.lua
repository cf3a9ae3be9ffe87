-- rw_rlock.lua: take a read share of an RWMutex if no writer holds it and,
-- when the caller gives way to writers, no writer's intention is alive.
-- A reader alone (no share in the readers' keys, not even an expired one,
-- and no intention in its way) keeps its share in the owner key, as a
-- writer's lease is kept, with the id 'r' (see lib/owner.lua): one SET NX
-- takes it, and it is renewed, checked and ends as a writer's lease does.
-- Readers that come while it holds keep theirs in the readers' keys. A
-- dlock older than this reads a lone reader as a writer: its writers wait
-- for it, and so do its readers, until a writer's release wakes them or
-- their timer ends.
-- KEYS[1]  the owner key: a writer's lease, or a lone reader's share
-- KEYS[2]  the last fence, ':fence'
-- KEYS[3]  readers: zset token -> fence, ':readers'
-- KEYS[4]  reader expiries: zset token -> deadline (server ms; inf: never),
--          ':rexp': one ms past the floored clock's ms plus the TTL, and
--          its keys live one ms more than the TTL, so that a share lasts
--          at least its TTL (see deadline_of in lib/clock.lua)
-- KEYS[5]  reader details: hash token -> "<since ms>:<metadata>", ':rmeta'
-- KEYS[6]  intentions: zset writer token -> deadline (server ms), ':intent'
--          KEYS[2] to KEYS[6] are declared on a Cluster only; on a single
--          Redis the script names them from KEYS[1] (see rwParts)
-- ARGV[1]  token of the new share
-- ARGV[2]  TTL in ms; 0 = the share never expires
-- ARGV[3]  metadata shown by Status
-- ARGV[4]  1 to wait while a writer's intention lives (PreferWriters), 0 not to
-- Returns  the fence (> 0) when taken (also when this token already has a
--          share: a try may be sent again after a lost reply; the share's
--          TTL then starts anew): bare, as a decimal string, for a share
--          kept in the owner key; as an integer for one kept in the
--          readers' keys;
--          {0, ms until it is worth trying again unasked (-1: only when
--           woken), holder: the writer's fence (a decimal string); when
--           only intentions stop the caller, the oldest reader's fence or
--           0}.
local owner = KEYS[1]
local tok, ttl = ARGV[1], ARGV[2]
local fence_key, readers = KEYS[2] or owner .. ':fence', KEYS[3] or owner .. ':readers'
local clock = clock_us()
local ms = string.sub(clock, 1, -4) -- server ms, the clock's digits but the last three
-- The latest intention, alive, stops a reader that gives way; the
-- writers' tries clear out the dead ones. (A dead writer's intention
-- stops readers until its deadline, no longer.)
local intended = false
if ARGV[4] == '1' then
  local last = redis.call('ZRANGE', KEYS[6] or owner .. ':intent', '-1', '-1', 'WITHSCORES')[2]
  intended = last and exceeds(last, ms) and last
end
local alone = not intended and redis.call('EXISTS', readers) == 0
local fence, w, wfence, wid = claim(owner, fence_key, tok, ARGV[3], ttl, clock, alone, 'r')
if fence then
  return fence
end
if w and wid ~= 'r' then
  return {0, redis.call('PTTL', owner), wfence}
end
-- @helpers
-- Beside a lone reader (w), or other shares, or given way.
local rexp, rmeta = KEYS[4] or owner .. ':rexp', KEYS[5] or owner .. ':rmeta'
local now_ms = tonumber(ms)
prune_waiters(readers, rexp, rmeta, ms)
local mine = redis.call('ZSCORE', readers, tok)
if mine then
  -- A try sent again after its reply was lost: the caller counts the
  -- share's TTL from this try, so Redis must too; never less than it
  -- did (the first try may run after a Refresh made the share longer).
  local deadline, left = deadline_of(ttl, now_ms)
  if left then
    redis.call('ZADD', rexp, 'GT', deadline, tok)
    expire_by_last(rexp, now_ms, deadline, left, readers, rexp, rmeta)
  end
  return tonumber(mine)
end
if intended then
  local oldest = wfence or redis.call('ZRANGE', readers, '0', '0', 'WITHSCORES')[2]
  return {0, tonumber(intended) - now_ms, tonumber(oldest or '0')}
end
fence = issue_fence(fence_key, clock)
local deadline, left = deadline_of(ttl, now_ms)
redis.call('ZADD', readers, fence, tok)
redis.call('ZADD', rexp, deadline, tok)
redis.call('HSET', rmeta, tok, ms .. ':' .. ARGV[3])
expire_by_last(rexp, now_ms, deadline, left, readers, rexp, rmeta)
return tonumber(fence)
