-- set_add.lua: add members to a mutex set. A new member is free and never
-- used, so it goes to the first waiter for any member (see set_hand_over
-- in lib/set.lua), or is the first any-member acquire takes. A member already in
-- the set keeps its state (a held one stays held, a free one keeps its
-- place in the LRU order); one removed while held stays in the set. A
-- set in the layout of an older dlock is converted first (set_convert).
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys), and
--          the older layout's other keys (see set_convert)
-- ARGV[1]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[2]  the set's channel
-- ARGV[3…] the members
-- Returns  the number of members that were not in the set.
set_convert()
local added = 0
local clock = clock_us()
for i = 3, #ARGV do
  local m = ARGV[i]
  local s = redis.call('ZSCORE', KEYS[1], m)
  local removing = s and redis.call('SISMEMBER', KEYS[3], m) == 1
  if removing and set_live(s, tonumber(clock)) then
    -- Cancels the removal; the holder keeps the member.
    local f = set_field(m)
    local r = redis.call('HGET', KEYS[2], f)
    local t = string.match(r, '^(%S+) ')
    redis.call('HSET', KEYS[2], f, t .. ' -' .. string.sub(r, #t + 3))
    redis.call('SREM', KEYS[3], m)
  elseif not s or removing then
    if removing then
      set_claim(m, s) -- its lease ran out: it left the set
      redis.call('SREM', KEYS[3], m)
    end
    redis.call('ZADD', KEYS[1], '0', m)
    added = added + 1
    -- Only waiters for any member can wait for a new one.
    set_hand_over(m, clock, ARGV[1], ARGV[2], 0)
  end
end
set_keep()
return added
