-- queue_beats.lua: queue_beat.lua for many waiters in one run, all at one
-- server time, packed lean (see batchForm.pack in merge.go): no counts
-- per call, the liveness timeout and the deadline it makes once per
-- group of waiters that share it, the owner keys of a group read at once
-- (see read_owners), a waiter's queue keys named from its owner key
-- rather than sent (each argument costs Redis more to read than a name
-- costs to join), and a flat reply (a list per call would cost Redis a
-- table reply each, about what two commands do).
-- KEYS[1]  the first waiter's owner key (it routes the run on a Cluster)
-- ARGV     groups of waiters that share a liveness timeout, each:
--          the timeout in ms, the number n of its waiters, their n owner
--          keys, then their n tokens in the same order; a waiter's queue,
--          liveness and metadata keys are its owner key and ':queue',
--          ':alive' and ':wmeta' (the parts of a queued lock: queued.go)
-- Returns  {server time in µs, then for each waiter in order the two
--          values beat_queue returns (the ms to wait, the holder's fence;
--          0, 0 for try_now)}; a waiter whose heartbeat failed has
--          {'dlock:error', message}, false in their place, and the others
--          still run
local now = now_us()
local now_ms = math.floor(now / 1000)
local out, o = {now}, 1
local a = 1
while a <= #ARGV do
  local live, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local deadline = int(now_ms + live)
  local k, t = a + 2, a + 2 + n -- the group's first owner key, first token
  local vals = read_owners(k, n)
  for i = 0, n - 1 do
    local owner = ARGV[k + i]
    local v = vals[i + 1]
    local ok, wait, fence = false, v
    if type(v) ~= 'table' then
      ok, wait, fence = pcall(beat_queue, owner, v, owner .. ':queue', owner .. ':alive', owner .. ':wmeta', ARGV[t + i], live, now_ms, deadline)
    end
    if not ok then
      wait, fence = {'dlock:error', type(wait) == 'table' and wait.err or tostring(wait)}, false
    end
    out[o + 1], out[o + 2] = wait, fence
    o = o + 2
  end
  a = t + n
end
return out
