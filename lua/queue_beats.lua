-- queue_beats.lua: queue_beat.lua for many waiters in one run, all at one
-- server time, packed lean (see batchForm.pack in merge.go): no counts
-- per call, no unused key, the liveness timeout once per group of waiters
-- that share it, the owner keys of a group read at once (see
-- read_owners), and a flat reply (a list per call would cost Redis a table
-- reply each, about what two commands do).
-- KEYS[1]  the first waiter's owner key (it routes the run on a Cluster)
-- ARGV     groups of waiters that share a liveness timeout, each:
--          the timeout in ms, the number n of its waiters, their n owner
--          keys, then for each waiter in the same order its queue,
--          liveness and waiter metadata keys and its token
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
  local k, w = a + 2, a + 2 + n -- the group's first owner key, first waiter
  local vals = read_owners(k, n)
  for i = 0, n - 1 do
    local owner, j = ARGV[k + i], w + 4 * i
    local v = vals[i + 1]
    local ok, wait, fence = false, v
    if type(v) ~= 'table' then
      ok, wait, fence = pcall(beat_queue, owner, v, ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 3], live, now_ms)
    end
    if not ok then
      wait, fence = {'dlock:error', type(wait) == 'table' and wait.err or tostring(wait)}, false
    end
    out[o + 1], out[o + 2] = wait, fence
    o = o + 2
  end
  a = w + 4 * n
end
return out
