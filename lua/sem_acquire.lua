-- sem_acquire.lua: take n permits of a Semaphore if they fit and the
-- caller comes first: nobody waits, or it is the first waiter (FIFO, no
-- barging: a waiter that needs more than is free holds back everyone
-- behind it). Otherwise (when asked) queue the caller, or renew its place.
-- Expired leases and dead waiters are dropped on the way, and waiters
-- that now fit are granted their permits (see grant_waiters). Costs
-- O(log n) in leases and waiters, plus O(k) for the k (at most 100)
-- expired leases or dead waiters it drops and the waiters it grants.
-- KEYS[1]  the main hash (see lib/permits.lua)
-- KEYS[2]  the last fence
-- KEYS[3]  leases: zset token -> deadline (server ms; inf: never)
-- KEYS[4]  the queue, KEYS[5] liveness, KEYS[6] waiter metadata (see
--          lib/waiters.lua); on a single Redis only KEYS[1] is sent, and
--          the script names the others, KEYS[1] and ':fence', ':leases',
--          ':queue', ':alive', ':wmeta', before it starts (loadNaming in
--          scripts.go)
-- ARGV[1]  token of the new lease
-- ARGV[2]  TTL in milliseconds; 0 = the lease never expires
-- ARGV[3]  metadata shown by Status
-- ARGV[4]  n: permits wanted, 1 to size
-- ARGV[5]  size: the caller's size of the semaphore
-- ARGV[6]  1 to join the queue when not granted (Acquire), 0 not to
--          (TryAcquire), 2 for a waiter's heartbeat: renew its place, take
--          nothing (see try_now)
-- ARGV[7]  waiter liveness timeout in ms
-- ARGV[8]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[9]  the release channel, on which granted waiters are told
-- Returns  the fence (> 0), bare, as a decimal string, when taken;
--          {fence} when this token holds a lease already (a try sent
--          again after a lost reply, or permits handed to it: the lease's
--          TTL then starts anew, but a hand-off's longer expiry stays
--          until the caller's first renewal);
--          {0, ms until it is worth trying again unasked (-1: only when
--           woken), the last fence issued (0 if forgotten), server time in
--           µs (a hand-off to this token dated before it was void by now)};
--          a heartbeat never takes permits: it replies try_now instead.
local tok, ttl, meta, join = ARGV[1], ARGV[2], ARGV[3], ARGV[6]
local n, size = tonumber(ARGV[4]), tonumber(ARGV[5])
local clock = clock_us()
local ms = string.sub(clock, 1, -4) -- the clock's ms
local now_ms = tonumber(ms)
local due = sem_due(KEYS[3], ms)
local v = redis.call('HMGET', KEYS[1], 'used', tok)
local head = redis.call('ZRANGE', KEYS[4], '0', '0')[1]
-- The common case: no lease to drop, none of this token's, nobody
-- waiting, and a try (not a heartbeat) whose permits fit: it takes them.
if #due == 0 and not v[2] and not head and join ~= '2' then
  local used = tonumber(v[1] or '0')
  -- (Permits counted with no leases key are for permits_and_lease.)
  if n <= size - used and (used == 0 or redis.call('EXISTS', KEYS[3]) == 1) then
    local fence = issue_fence(KEYS[2], clock)
    local deadline, left = deadline_of(ttl, now_ms)
    add_lease(KEYS[1], KEYS[3], tok, ARGV[4], ARGV[5], fence, ms, meta, deadline, left, used == 0)
    return fence
  end
end
-- @helpers
local beat = join == '2'
local used, mine = permits_and_lease(KEYS[1], KEYS[3], tok, ms, due, v)
-- More leases may have run out than one look lists: while the permits
-- asked for do not fit, drop them a hundred at a time, up to a thousand
-- in all, so that a TryAcquire is not refused permits that are free.
for _ = 2, 10 do
  if #due < 100 or n <= size - used then
    break
  end
  due = sem_due(KEYS[3], ms)
  used, mine = permits_and_lease(KEYS[1], KEYS[3], tok, ms, due)
end
if head then
  used = grant_waiters(KEYS, ARGV[8], ARGV[9], clock, used)
  head = first_waiter(KEYS[4])
  mine = mine or lease_of(KEYS[1], tok) -- granted just now
end
if mine and beat then
  return try_now(clock) -- handed to the waiter
elseif mine then
  -- A try sent again after its reply was lost, or a waiter's finding the
  -- permits handed to it: the lease lasts at least ttl from now, never
  -- less than it did (the first try may run after a Refresh made it
  -- longer).
  local deadline, left = deadline_of(ttl, now_ms)
  redis.call('ZADD', KEYS[3], 'GT', deadline, tok)
  outlive(KEYS[1], KEYS[3], left, false)
  return {mine.fence}
end
if not beat and (not head or head == tok) and n <= size - used then
  if head then
    drop_waiters(KEYS[4], KEYS[5], KEYS[6], tok)
  end
  local fence = issue_fence(KEYS[2], clock)
  local deadline, left = deadline_of(ttl, now_ms)
  add_lease(KEYS[1], KEYS[3], tok, ARGV[4], ARGV[5], fence, ms, meta, deadline, left, used == 0)
  return fence
end
local now = tonumber(clock)
if join ~= '0' and not join_queue(KEYS[4], KEYS[5], KEYS[6], tok, ARGV[4] .. ':' .. ARGV[5] .. ':' .. meta, now, tonumber(ARGV[7]), beat) then
  return try_now(now) -- a heartbeat of a waiter dropped from the queue
end
-- First in line, the permits it lacks come back by a release, which
-- grants them, or at the latest when the first lease runs out. Behind
-- another, its turn comes when that one is granted, leaves, or is
-- dropped at its liveness deadline.
local wait = -1
if beat and not head then
  -- A heartbeat that finds no line (its key removed by something else)
  -- but the waiter's liveness: nobody would grant it the permits, so it
  -- tries, which takes them or queues it again.
  return try_now(now)
elseif head and head ~= tok then
  local deadline = redis.call('ZSCORE', KEYS[5], head)
  if deadline then
    -- Past already when more dead lay ahead than one prune drops: worth
    -- a try at once, which drops more.
    wait = math.max(0, tonumber(deadline) - now_ms)
  else
    -- Queued with no deadline (something else removed it): as good as
    -- dead (see grant_waiters, which leaves a first waiter that does not
    -- fit to this check). Worth a try at once, past it.
    drop_waiters(KEYS[4], KEYS[5], KEYS[6], head)
    wait = 0
  end
else
  local first = redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')[2]
  if first and first ~= 'inf' then
    wait = math.max(0, tonumber(first) - now_ms) -- 0: more ran out than one call drops
  end
end
return {0, wait, tonumber(redis.call('GET', KEYS[2]) or '0'), now}
