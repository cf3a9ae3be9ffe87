-- rw_status.lua: describe an RWMutex without changing it.
-- KEYS[1]  the owner key: a writer's lease, or a lone reader's share
--          (see rw_rlock.lua)
-- KEYS[2]  the last fence
-- KEYS[3]  readers, KEYS[4] reader expiries, KEYS[5] reader details
-- KEYS[6]  intentions, KEYS[7] the writers' line, KEYS[8] its liveness,
--          KEYS[9] its metadata
--          (on a single Redis only KEYS[1] is sent: see rw_lock.lua)
-- ARGV     none
-- Returns  {held by a writer (0|1), the writer's remaining TTL in ms (-1:
--           never expires, -2: no writer), fence (the writer's, else the
--           last one remembered, else 0), writer metadata, writer acquired
--           at (server ms),
--           readers: flat list of {metadata, remaining TTL in ms (-1:
--           never expires), fence, acquired at (server ms)}, oldest first
--           (a lone reader first: the others came after it),
--           1 when a writer's intention is alive, else 0,
--           waiting writers: flat list of {metadata, arrived at (server
--           ms)} in order}
-- Readers, intentions and writers past their deadline are left out.
local now_ms = time_ms()
local out, id = owner_status(KEYS[1], KEYS[2])
local readers = {}
if id == 'r' then
  -- A lone reader: {metadata, TTL, fence, since}, as the others.
  readers = {out[4], out[2], out[3], out[5]}
  out = {0, -2, tonumber(redis.call('GET', KEYS[2]) or '0'), '', 0}
end
local rs = redis.call('ZRANGE', KEYS[3], '0', '-1', 'WITHSCORES')
for i = 1, #rs, 2 do
  local deadline = redis.call('ZSCORE', KEYS[4], rs[i])
  local ttl = -1
  if deadline and deadline ~= 'inf' then
    ttl = tonumber(deadline) - now_ms
  end
  if deadline and (deadline == 'inf' or ttl > 0) then
    local d = redis.call('HGET', KEYS[5], rs[i]) or '0:'
    local sep = string.find(d, ':', 1, true) or (#d + 1)
    table.insert(readers, string.sub(d, sep + 1))
    table.insert(readers, ttl)
    table.insert(readers, tonumber(rs[i + 1]))
    table.insert(readers, tonumber(string.sub(d, 1, sep - 1)) or 0)
  end
end
table.insert(out, readers)
local waiting = 0
if redis.call('ZCOUNT', KEYS[6], '(' .. int(now_ms), '+inf') > 0 then
  waiting = 1
end
table.insert(out, waiting)
table.insert(out, live_waiters(KEYS[7], KEYS[8], KEYS[9], now_ms))
return out
