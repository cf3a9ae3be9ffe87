-- owner_renewals.lua: owner_refresh.lua (without an announcement) for
-- many leases in one run, packed lean (see batchForm.pack in merge.go): no
-- counts per call, and per group of leases that share a TTL, one expiry
-- time, computed once, and one read of their keys (see read_owners). A
-- renewal costs Redis its PEXPIREAT (which, unlike PEXPIRE, Redis does
-- not rewrite for its replicas) and its share of the rest; one that
-- extends its lease, as nearly all do, adds nothing to the reply.
-- KEYS[1]  the first lease's owner key (it routes the run on a Cluster)
-- ARGV     groups of leases that share a TTL, each: the new TTL in
--          milliseconds, the number n of its leases, their n owner keys,
--          their n tokens (in the same order)
-- Returns  a flat list of the leases not extended, each its place in the
--          run (from 1, the order of ARGV) and its reply: 0 when the token
--          no longer held it (owner_refresh.lua's), or {'dlock:error',
--          message} when reading its key failed (see replyCmd in
--          merge.go); every other lease was extended (1). An error of
--          PEXPIREAT fails the run, whose calls then go alone
local out, o, c = {}, 0, 0
-- The expiry is the clock read now, before any lease's key, plus the TTL,
-- plus the millisecond TIME's floor drops: so it is later than the
-- renewal's send time plus its TTL, which is when its holder counts its
-- lease out. (A PEXPIREAT at or before Redis' clock deletes the key at
-- once, as the lease's end: never before the holder's deadline so.)
local now = time_ms() + 1
local a = 1
while a <= #ARGV do
  local at, n = int(now + tonumber(ARGV[a])), tonumber(ARGV[a + 1])
  local k, t = a + 2, a + 2 + n -- the group's first key, first token
  local vals = read_owners(k, n)
  for i = 0, n - 1 do
    local v = vals[i + 1]
    c = c + 1
    if type(v) == 'table' then
      out[o + 1], out[o + 2] = c, {'dlock:error', v.err} -- a key of another type, or node
      o = o + 2
    elseif held_by(v, ARGV[t + i]) then
      redis.call('PEXPIREAT', ARGV[k + i], at)
    else
      out[o + 1], out[o + 2] = c, 0
      o = o + 2
    end
  end
  a = t + n
end
return out
