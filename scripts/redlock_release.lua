-- redlock_release.lua: release one node's share of a Redlock lease if the
-- token holds it here, raise the node's last fence to the lease's fence,
-- and wake one waiter of each client listening on this node.
-- KEYS[1]  the owner hash
-- KEYS[2]  this node's last fence
-- ARGV[1]  token of the lease
-- ARGV[2]  the lease's fence (the highest of its nodes'): once raised to
--          it, this node's next fence is above it whatever its clock says
-- ARGV[3]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[4]  the release channel
-- Returns  1 when released; 0 when the token did not hold it (nothing changes).
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
local now = now_us()
local fence = tonumber(ARGV[2])
if fence > tonumber(redis.call('GET', KEYS[2]) or '0') then
  -- Kept, as issue_fence keeps it, while it may be ahead of the clock.
  redis.call('SET', KEYS[2], int(fence), 'PX', math.max(1, math.ceil((fence - now) / 1000) + 60000))
end
redis.call(ARGV[3], ARGV[4], 'one')
return 1
