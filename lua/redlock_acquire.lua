-- redlock_acquire.lua: one node's vote in a Redlock acquisition: take the
-- lock on this node if no lease holds it here. The lease is the holder's
-- only if a majority of nodes vote for it (see redlock.go).
-- KEYS[1]  the owner key (see lib/owner.lua), expiring with the lease
-- KEYS[2]  this node's last fence
-- ARGV[1]  token
-- ARGV[2]  lease TTL in ms (> 0)
-- ARGV[3]  metadata
-- ARGV[4]  the lease's public id: tells other callers which of this
--          node's holders are the same lease as on other nodes
-- Returns  {1, fence (a decimal string)} when taken here (also when this
--          token holds it already, from a lost reply or an earlier try of
--          the same Lock: its expiry is then set anew, so the vote counts
--          from this try);
--          {0, ms the holder's lease has left here, holder's fence here (a
--           decimal string), holder's id}.
local fence, _, hfence, hid = claim(KEYS[1], KEYS[2], ARGV[1], ARGV[3], ARGV[2], clock_us(), true, ARGV[4])
if fence then
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1]), hfence, hid}
