-- set_held.lua: tell whether a token holds a member, without changing it.
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1]  token of the lease
-- ARGV[2]  the member
-- Returns  1 when the token holds the member and its lease has not
--          expired; else 0.
if not set_owns(ARGV[2], ARGV[1]) then
  return 0
end
local e = set_expiry(ARGV[2])
if e and e > time_ms() then
  return 1
end
return 0
