-- queue_leave.lua: withdraw a caller that gives up: out of the queue at
-- once, and if it holds the lock though it never saw it (a try whose reply
-- was lost, or a hand-off that came as its context ended), release that
-- too. If the lock is then free, hand it to the waiter now first.
-- KEYS     as queue_acquire.lua's: [1] the owner key, [2] the last fence,
--          [3] the queue, [4] liveness, [5] waiter metadata; [2] to [5]
--          declared on a Cluster only, else named from [1]
-- ARGV[1]  token of the caller
-- ARGV[2]  "<starve_us> <publish> <channel>", as for queue_release
-- ARGV[3]  (Election only) set to announce, as queue_release does, a lock
--          the caller held left free, or one handed to the waiter next
-- Returns  1 when the caller was queued or held the lock, else 0.
local tok = ARGV[1]
local starve_us, publish, channel = wake_args(ARGV[2])
local owner = KEYS[1]
local fence_key, queue = KEYS[2] or owner .. ':fence', KEYS[3] or owner .. ':queue'
local alive, wmeta = KEYS[4] or owner .. ':alive', KEYS[5] or owner .. ':wmeta'
local removed, first = withdraw(queue, alive, wmeta, tok)
local held = owns(owner, tok)
if held then
  redis.call('DEL', owner)
end
if held or (first and redis.call('EXISTS', owner) == 0) then
  local heir = hand_over(owner, fence_key, queue, alive, wmeta, publish, channel, starve_us, first_waiter(queue))
  if (held or heir) and ARGV[3] then
    redis.pcall(publish, channel, 'leader') -- released or handed on: never fail on it
  end
end
return (held or removed) and 1 or 0
