-- set_held.lua: tell whether a token holds a member, without changing it.
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys)
-- ARGV[1]  token of the lease
-- ARGV[2]  the member
-- Returns  1 when the token holds the member and its lease has not
--          expired; else 0.
if not held_by(redis.call('HGET', KEYS[2], set_field(ARGV[2])), ARGV[1]) then
  return 0
end
if set_live(redis.call('ZSCORE', KEYS[1], ARGV[2]), now_us()) then
  return 1
end
return 0
