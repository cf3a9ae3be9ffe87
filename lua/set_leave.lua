-- set_leave.lua: withdraw a caller that gives up: out of the queue at
-- once, and if it holds a member though it never saw it (a try whose
-- reply was lost, or a hand-off that came as its context ended), release
-- that too, handing it on. If it was first in the queue, the least
-- recently used free member (one may have been left free for it to try
-- for) goes to the waiter now first for it.
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys)
-- ARGV[1]  token of the caller
-- ARGV[2]  "<starve_us> <publish> <channel>", as for set_release
-- Returns  1 when the caller was queued or held a member, else 0.
local tok = ARGV[1]
local starve_us, publish, channel = wake_args(ARGV[2]) -- read before anything is written
-- First read of KEYS[2], before anything is written (see lib/set.lua).
local m = redis.call('HGET', KEYS[2], '\0' .. tok)
local queued, first = withdraw(KEYS[5], KEYS[6], KEYS[7], tok)
if m then
  local r = redis.call('HGET', KEYS[2], set_field(m))
  if held_by(r, tok) then
    set_let_go(m, tok, r, clock_us(), publish, channel, starve_us)
    return 1
  end
  redis.call('HDEL', KEYS[2], '\0' .. tok)
end
if first then
  local lru = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
  local clock = clock_us()
  if lru[1] and not set_live(lru[2], tonumber(clock)) and set_claim(lru[1], lru[2]) then
    set_hand_over(lru[1], clock, publish, channel, starve_us)
  end
end
return queued and 1 or 0
