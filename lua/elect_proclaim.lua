-- elect_proclaim.lua: change the value an Election's leader announces,
-- within its term: the lease, its term (fence), start and TTL stay as
-- they are. Those who follow the leader are told by "leader".
-- KEYS[1]  the owner key (see lib/owner.lua), the leadership's lease
-- ARGV[1]  token of the leadership
-- ARGV[2]  the owner key's new metadata field: value and metadata
-- ARGV[3]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[4]  the Election's channel
-- Returns  1 when changed; 0 when the token does not lead (nothing changes).
local h = owner_of(redis.call('GET', KEYS[1]))
if not h or h.tok ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], owner_value(h.tok, int(h.fence), int(h.since) .. '000', h.id, ARGV[2]), 'KEEPTTL')
redis.pcall(ARGV[3], ARGV[4], 'leader') -- changed: never fail on it
return 1
