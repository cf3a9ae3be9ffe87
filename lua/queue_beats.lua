-- queue_beats.lua: queue_beat.lua for many waiters in one run (see
-- lib/batch.lua), all at one server time.
-- KEYS[1]  the first call's owner key
-- ARGV     the calls, each with queue_beat.lua's KEYS and ARGV
-- Returns  the list of the calls' replies (queue_beat.lua's), in order
local now = now_us()
-- Every waiter of a client has the same liveness timeout: read it once.
local live, live_ms
return each_call(function(k)
  if ARGV[k + 6] ~= live then
    live, live_ms = ARGV[k + 6], tonumber(ARGV[k + 6])
  end
  return beat_queue(ARGV[k], ARGV[k + 2], ARGV[k + 3], ARGV[k + 4], ARGV[k + 5], live_ms, now)
end)
