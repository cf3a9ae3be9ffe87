-- rw_leave.lua: withdraw a writer that stops waiting, or whose try's reply
-- was lost: its place in the writers' line and its intention, and the
-- write side if a try of its own took it or a release handed it over (the
-- caller will never unlock). Move on whom that lets in: as rw_unlock does
-- when it held the lock, or was first in line for a free lock no reader
-- holds; when its intention was the last one and no writer holds the
-- lock (a lone reader may: see rw_rlock.lua), wake the readers it
-- stopped (else they sleep until its deadline).
-- KEYS[1]  the owner key: a writer's lease, or a lone reader's share
-- KEYS[2]  the last fence
-- KEYS[3]  readers, KEYS[4] reader expiries, KEYS[5] reader details
-- KEYS[6]  intentions, KEYS[7] the writers' line, KEYS[8] its liveness,
--          KEYS[9] its metadata
--          (on a single Redis only KEYS[1] is sent: see rw_lock.lua)
-- ARGV[1]  token of the writer
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the readers' release channel
-- ARGV[4]  the writers' release channel
-- ARGV[5]  starve_us, as for rw_unlock
-- Returns  1 when the writer was in line or held the write side, else 0.
local tok = ARGV[1]
local queued, first = withdraw(KEYS[7], KEYS[8], KEYS[9], tok)
local intended = redis.call('ZREM', KEYS[6], tok) == 1
local held = owns(KEYS[1], tok)
if held then
  redis.call('DEL', KEYS[1])
end
local now_ms = time_ms()
if held or (first and redis.call('EXISTS', KEYS[1]) == 0) then
  local reader, fence = first_waiter(KEYS[3])
  reader = live_first(KEYS[3], KEYS[4], KEYS[5], reader, fence, now_ms)
  if not reader then
    next_writer(KEYS[1], KEYS[2], KEYS[6], KEYS[7], KEYS[8], KEYS[9], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), true)
    return 1
  end
end
if intended then
  redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now_ms)
  if redis.call('ZCARD', KEYS[6]) == 0 then
    if not writer_holds(KEYS[1]) then -- a lone reader may hold it
      wake_all_readers(ARGV[2], ARGV[3])
    end
  end
end
return (held or queued or intended) and 1 or 0
