-- owner_held.lua: tell whether a lease holds its owner key, changing
-- nothing. A script rather than a GET so that it is read on the master
-- whatever the client's routing (go-redis sends a GET to a replica with
-- ReadOnly, RouteByLatency or RouteRandomly).
-- KEYS[1]  the owner key
-- ARGV[1]  token of the lease
-- Returns  1 when held by the token, else 0.
if owns(KEYS[1], ARGV[1]) then
  return 1
end
return 0
