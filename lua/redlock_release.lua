-- redlock_release.lua: release one node's share of a Redlock lease if the
-- token holds it here, raise the node's last fence to the lease's fence,
-- and wake one waiter of each client listening on this node, if asked.
-- KEYS[1]  the owner key
-- KEYS[2]  this node's last fence
-- ARGV[1]  token of the lease
-- ARGV[2]  the lease's fence (the highest of its nodes'): once raised to
--          it, this node's next fence is above it whatever its clock says
-- ARGV[3]  publish command: PUBLISH, or SPUBLISH on Redis Cluster; '' to
--          wake nobody (a try giving back a share while another lease
--          holds a majority)
-- ARGV[4]  the release channel
-- ARGV[5]  (a try's give-back) the try's number: the share goes only if
--          no later try of the token took it up (see redlock_acquire.lua);
--          absent: whichever try took it (Unlock, a give-up)
-- Returns  1 when released; 0 when the token did not hold it, or a later
--          try did (nothing changes).
local v = redis.call('GET', KEYS[1])
if not held_by(v, ARGV[1]) then
  return 0
end
if ARGV[5] and try_of(select(3, holder_of(v))) > tonumber(ARGV[5]) then
  return 0
end
redis.call('DEL', KEYS[1])
local now = now_us()
local fence = tonumber(ARGV[2])
if fence > tonumber(redis.call('GET', KEYS[2]) or '0') then
  keep_fence(KEYS[2], fence, now)
end
if ARGV[3] ~= '' then
  redis.call(ARGV[3], ARGV[4], 'one')
end
return 1
