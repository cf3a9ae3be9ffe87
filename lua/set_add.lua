-- set_add.lua: add members to a mutex set. A new member is free and never
-- used, so it goes to the first waiter for any member (see set_hand_over
-- in lib/set.lua), or is the first any-member acquire takes. A member already in
-- the set keeps its state (a held one stays held, a free one keeps its
-- place in the LRU order); one removed while held stays in the set.
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[2]  the set's channel
-- ARGV[3…] the members
-- Returns  the number of members that were not in the set.
local added = 0
local clock
for i = 3, #ARGV do
  local m = ARGV[i]
  if redis.call('ZADD', KEYS[1], 'NX', '0', m) == 1 then
    redis.call('ZADD', KEYS[2], '0', m)
    added = added + 1
    -- Only waiters for any member can wait for a new one.
    clock = clock or clock_us()
    set_hand_over(m, clock, ARGV[1], ARGV[2], 0)
  else
    -- Cancels a pending removal; the holder keeps the member.
    redis.call('SREM', KEYS[9], m)
  end
end
set_keep()
return added
