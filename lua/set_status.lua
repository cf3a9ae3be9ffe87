-- set_status.lua: summarise a mutex set without changing it. O(log n),
-- plus O(r) for the r members removed while held.
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys)
-- ARGV     none
-- Returns  {members, members held now, ms until the next lease runs out
--           (-1: every held lease never expires; -2: none held),
--           highest fence issued in the set (0 if none),
--           waiters: flat list of {"<n>:<member><metadata>" (see
--           lib/set.lua), arrived at (server ms)} in order}
-- Members whose lease expired count as free, or as gone if removed.
-- A first read of KEYS[2], which meets WRONGTYPE on the older layout
-- (see lib/set.lua).
redis.call('HGET', KEYS[2], '\0')
local now = now_us()
local now_ms = math.floor(now / 1000)
local members = redis.call('ZCARD', KEYS[1])
for _, m in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if not set_live(redis.call('ZSCORE', KEYS[1], m), now) then
    members = members - 1
  end
end
-- Held: a score above now (a release's whole score is above it only
-- after the clock stepped back; such a member counts as held until the
-- clock is past it).
local held = redis.call('ZCOUNT', KEYS[1], '(' .. int(now), '+inf')
local soonest = -2
local top = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(now), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
if top[2] == 'inf' then
  soonest = -1
elseif top[2] then
  soonest = math.max(math.floor((tonumber(top[2]) + 0.5 - now) / 1000), 1)
end
local waiters = live_waiters(KEYS[5], KEYS[6], KEYS[7], now_ms)
return {members, held, soonest, tonumber(redis.call('GET', KEYS[4]) or '0'), waiters}
