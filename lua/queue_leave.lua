-- queue_leave.lua: withdraw a caller that gives up: out of the queue at
-- once, and if it holds the lock though it never saw it (a try whose reply
-- was lost, or a hand-off that came as its context ended), release that
-- too. If the lock is then free, hand it to the waiter now first.
-- KEYS[1]  the owner key
-- KEYS[2]  the last fence
-- KEYS[3]  the queue, KEYS[4] liveness, KEYS[5] waiter metadata
-- ARGV[1]  token of the caller
-- ARGV[2]  "<starve_us> <publish> <channel>", as for queue_release
-- ARGV[3]  (Election only) set to announce, as queue_release does, a lock
--          the caller held left free
-- Returns  1 when the caller was queued or held the lock, else 0.
local tok = ARGV[1]
local starve_us, publish, channel = wake_args(ARGV[2])
local removed, first = withdraw(KEYS[3], KEYS[4], KEYS[5], tok)
local held = owns(KEYS[1], tok)
if held then
  redis.call('DEL', KEYS[1])
end
if held or (first and redis.call('EXISTS', KEYS[1]) == 0) then
  local heir = hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], publish, channel, starve_us, first_waiter(KEYS[3]))
  if held and not heir and ARGV[3] then
    redis.pcall(publish, channel, 'leader') -- released: never fail on it
  end
end
return (held or removed) and 1 or 0
