-- queue_beat.lua: the heartbeat of a waiter queued for a Mutex, FairMutex
-- or Election (see beat_queue). Batched form: queue_beats.lua.
-- KEYS     as queue_acquire.lua's: [1] owner key, [2] last fence (unused),
--          [3] queue, [4] liveness, [5] waiter metadata; [2] to [5]
--          declared on a Cluster only, else named from [1]
-- ARGV[1]  the waiter's token
-- ARGV[2]  waiter liveness timeout in ms
-- Returns  {0, ms until it is worth trying again unasked (the holder's
--          lease time left, -1: no expiry; when the lock is free, the
--          liveness time left of the waiter ahead), the holder's fence
--          (as a decimal string, which costs Redis less than a number; 0
--          when free), server time in µs}, or try_now's {0, 0, 0, server
--          time in µs}
local now = now_us()
local now_ms, live = math.floor(now / 1000), tonumber(ARGV[2])
local owner = KEYS[1]
local wait, fence = beat_queue(owner, redis.call('GET', owner), KEYS[3] or owner .. ':queue', KEYS[4] or owner .. ':alive', KEYS[5] or owner .. ':wmeta', ARGV[1], live, now_ms, int(now_ms + live))
return {0, wait, fence, now}
