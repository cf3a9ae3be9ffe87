-- rw_runlock.lua: release a read share of an RWMutex if the token has one;
-- when it was the last share, hand the lock to the first waiting writer
-- (see next_writer in lib/writers.lua).
-- KEYS[1]  the owner key: a writer's lease, or a lone reader's share (see
--          rw_rlock.lua)
-- KEYS[2]  the last fence, ':fence'
-- KEYS[3]  readers, KEYS[4] reader expiries, KEYS[5] reader details:
--          ':readers', ':rexp', ':rmeta'
-- KEYS[6]  intentions, KEYS[7] the writers' line, KEYS[8] its liveness,
--          KEYS[9] its metadata: ':intent', ':queue', ':alive', ':wmeta'
--          KEYS[2] to KEYS[9] are declared on a Cluster only; on a single
--          Redis the script names them from KEYS[1] (see rwParts)
-- ARGV[1]  token of the share
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the writers' release channel
-- ARGV[4]  starve_us, as for rw_unlock
-- Returns  1 when released; 0 when the token had no live share (expired or
--          removed; nothing else changes, but that a share of it that ran
--          out, left for a later prune, is let go as a release would).
local owner = KEYS[1]
local tok = ARGV[1]
local readers, queue = KEYS[3] or owner .. ':readers', KEYS[7] or owner .. ':queue'
local holder = redis.call('GET', owner)
local lone = held_by(holder, tok)
if lone then
  -- A lone reader's share: nobody else reads or waits, the common case.
  redis.call('DEL', owner)
  if redis.call('EXISTS', readers, queue) == 0 then
    return 1
  end
end
-- @helpers
local rexp, rmeta = KEYS[4] or owner .. ':rexp', KEYS[5] or owner .. ':rmeta'
local ms = string.sub(clock_us(), 1, -4) -- server ms, the clock's digits but the last three
-- released is the reply: 0 for a share that ran out but was left for a
-- later prune (more were due than one drops), which goes all the same.
local released = 1
if prune_waiters(readers, rexp, rmeta, ms) == 100 and not lone then
  local s = redis.call('ZSCORE', rexp, tok)
  if s and s ~= 'inf' and tonumber(s) <= tonumber(ms) then
    released = 0
  end
end
if not lone then
  if redis.call('ZREM', readers, tok) == 0 then
    return 0
  end
  redis.call('ZREM', rexp, tok)
  redis.call('HDEL', rmeta, tok)
end
if redis.call('ZCARD', readers) > 0 then
  if not lone then
    expire_by_last(rexp, tonumber(ms), nil, nil, readers, rexp, rmeta)
  end
  return released
end
-- The last share in the readers' keys: a lone reader's in the owner key
-- (the only holder it can have while a share lived) still holds the lock.
if holder and not lone then
  return released
end
-- Only waiting writers can be stopped by readers alone (readers waiting
-- behind an intention stay stopped by it).
if redis.call('EXISTS', queue) == 0 then
  return released
end
next_writer(owner, KEYS[2] or owner .. ':fence', KEYS[6] or owner .. ':intent', queue, KEYS[8] or owner .. ':alive', KEYS[9] or owner .. ':wmeta', ARGV[2], '', ARGV[3], tonumber(ARGV[4]), false)
return released
