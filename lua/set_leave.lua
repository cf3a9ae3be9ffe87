-- set_leave.lua: withdraw a caller that gives up: out of the queue at
-- once, and if it holds a member though it never saw it (a try whose
-- reply was lost, or a hand-off that came as its context ended), release
-- that too, handing it on. If it was first in the queue, the least
-- recently used free member (one may have been left free for it to try
-- for) goes to the waiter now first for it.
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1]  token of the caller
-- ARGV[2]  "<starve_us> <publish> <channel>", as for set_release
-- Returns  1 when the caller was queued or held a member, else 0.
local tok = ARGV[1]
local starve_us, publish, channel = wake_args(ARGV[2]) -- read before anything is written
local queued, first = withdraw(KEYS[11], KEYS[12], KEYS[13], tok)
local m = redis.call('HGET', KEYS[5], tok)
if m then
  set_let_go(m, tok, clock_us(), publish, channel, starve_us)
  return 1
end
if first then
  m = redis.call('ZRANGE', KEYS[2], '0', '0')[1]
  if m then
    set_hand_over(m, clock_us(), publish, channel, starve_us)
  end
end
return queued and 1 or 0
