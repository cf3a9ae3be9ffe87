-- elect_leader.lua: read an Election's leader without changing anything.
-- KEYS[1]  the owner key (see lib/owner.lua), the leadership's lease
-- KEYS[2]  the last fence (the last term), the owner key and ':fence';
--          declared on a Cluster only, else named from KEYS[1]
--          (KEYS[3] to KEYS[5], a queue's, are not read)
-- ARGV     none
-- Returns  {led (0|1), remaining TTL in ms (-1: never expires, -2: none),
--           term, the leader's value and metadata (see election.go), the
--           term's start (server ms)}, as owner_status gives them.
return owner_status(KEYS[1], KEYS[2] or KEYS[1] .. ':fence')
