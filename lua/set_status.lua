-- set_status.lua: summarise a mutex set without changing it. O(log n),
-- plus O(r) for the r members removed while held.
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV     none
-- Returns  {members, members held now, ms until the next lease runs out
--           (-1: every held lease never expires; -2: none held),
--           highest fence issued in the set (0 if none),
--           waiters: flat list of {"<n>:<member><metadata>" (see
--           lib/set.lua), arrived at (server ms)} in order}
-- Members whose lease expired count as free, or as gone if removed.
local now = now_us()
local now_ms = math.floor(now / 1000)
local members = redis.call('ZCARD', KEYS[1])
for _, m in ipairs(redis.call('SMEMBERS', KEYS[9])) do
  local e = set_expiry(m)
  if not e or e <= now_ms then
    members = members - 1
  end
end
local held = redis.call('ZCOUNT', KEYS[3], '(' .. int(now_ms), '+inf')
local soonest = -2
local first = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. int(now_ms), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
if first[2] == 'inf' then
  soonest = -1
elseif first[2] then
  -- From the exact time: expiries are rounded up to the next ms.
  soonest = math.max(math.floor((tonumber(first[2]) * 1000 - now) / 1000), 1)
end
local waiters = live_waiters(KEYS[11], KEYS[12], KEYS[13], now_ms)
return {members, held, soonest, tonumber(redis.call('GET', KEYS[10]) or '0'), waiters}
