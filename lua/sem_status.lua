-- sem_status.lua: describe a Semaphore without changing it.
-- KEYS     as for sem_acquire
-- ARGV     none
-- Returns  {permits held by live leases, the size of the latest
--           acquisition (0 if unknown), the last fence issued (0 if
--           forgotten), ms until the first live lease runs out (-1: none
--           ever does, -2: none is held),
--           leases: flat list of {metadata, remaining TTL in ms (-1:
--           never expires), fence, acquired at (server ms), permits},
--           in deadline order,
--           waiters: flat list of {"<permits>:<size>:<metadata>", arrived
--           at (server ms)} in order}
-- Leases and waiters past their deadline are left out.
local now_ms = time_ms()
local ls = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. int(now_ms), '+inf', 'WITHSCORES')
local leases, used, first = {}, 0, -2
for i = 1, #ls, 2 do
  local l = lease_of(KEYS[1], ls[i])
  if l then
    local ttl = -1
    if ls[i + 1] ~= 'inf' then
      ttl = tonumber(ls[i + 1]) - now_ms
    end
    if first == -2 then
      first = ttl
    end
    used = used + l.n
    for _, v in ipairs({l.meta, ttl, l.fence, l.since, l.n}) do
      table.insert(leases, v)
    end
  end
end
local size = tonumber(redis.call('HGET', KEYS[1], 'size') or '0')
local fence = tonumber(redis.call('GET', KEYS[2]) or '0')
return {used, size, fence, first, leases, live_waiters(KEYS[4], KEYS[5], KEYS[6], now_ms)}
