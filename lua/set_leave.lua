-- set_leave.lua: withdraw a caller that gives up: out of the queue at
-- once, and if it holds a member though it never saw it (a try whose
-- reply was lost, or a hand-off that came as its context ended), release
-- that too, handing it on. If it was first in the queue, the least
-- recently used free member (one may have been left free for it to try
-- for) goes to the waiter now first for it.
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1]  token of the caller
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the set's channel
-- ARGV[4]  starve_us, as for set_release
-- Returns  1 when the caller was queued or held a member, else 0.
local tok = ARGV[1]
local queued, first = withdraw(KEYS[11], KEYS[12], KEYS[13], tok)
local m = redis.call('HGET', KEYS[5], tok)
if m then
  set_let_go(m, tok, clock_us(), ARGV[2], ARGV[3], tonumber(ARGV[4]))
  return 1
end
if first then
  m = redis.call('ZRANGE', KEYS[2], '0', '0')[1]
  if m then
    set_hand_over(m, clock_us(), ARGV[2], ARGV[3], tonumber(ARGV[4]))
  end
end
return queued and 1 or 0
