-- redlock_acquire.lua: one node's vote in a Redlock acquisition: take the
-- lock on this node if no lease holds it here. The lease is the holder's
-- only if a majority of nodes vote for it (see redlock.go).
-- KEYS[1]  the owner key (see lib/owner.lua), expiring with the lease
-- KEYS[2]  this node's last fence
-- ARGV[1]  token
-- ARGV[2]  lease TTL in ms (> 0)
-- ARGV[3]  metadata
-- ARGV[4]  "<lease id>.<try>": the lease's public id, which tells other
--          callers which of this node's holders are the same lease as on
--          other nodes, and the number of this try among those of one
--          acquisition (1, 2, ...), which a give-back names (see
--          redlock_release.lua)
-- Returns  {1, fence (a decimal string)} when taken here (also when this
--          token holds it already, from a lost reply or an earlier try of
--          the same Lock: its expiry is then set anew, so the vote counts
--          from this try, and its try number raised to this one's, so that
--          an earlier try's give-back arriving late leaves it);
--          {0, ms the holder's lease has left here, holder's fence here (a
--           decimal string), holder's id (with its try)}.
local fence, holder, hfence, hid = claim(KEYS[1], KEYS[2], ARGV[1], ARGV[3], ARGV[2], clock_us(), true, ARGV[4])
if fence then
  if holder and try_of(hid) < try_of(ARGV[4]) then
    -- An earlier try's share, taken up by this one.
    local v = redis.call('GET', KEYS[1])
    local head, meta = string.match(v, '^(%S+ %d+ %d+) %S* (.*)$')
    redis.call('SET', KEYS[1], head .. ' ' .. ARGV[4] .. ' ' .. meta, 'KEEPTTL')
  end
  return {1, fence}
end
return {0, redis.call('PTTL', KEYS[1]), hfence, hid}
