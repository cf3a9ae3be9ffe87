-- permits.lua: the leases of a Semaphore, kept as two keys, and the
-- hand-over of freed permits to its queue of waiters (see waiters.lua).
-- The main key is a hash: field 'used' counts the permits the live leases
-- hold, field 'size' is the size the latest acquisition asked under, and
-- each lease's token (32 hex digits, never a word) maps to
-- "<permits> <fence> <since ms> <metadata>". The leases key is a zset
-- token -> deadline (server ms; inf: never). Both live as long as the
-- longest lease. A waiter's metadata entry is "<permits>:<size>:<meta>".

-- lease_of returns tok's lease in the main hash, parsed into
-- {n, fence, since, meta}, or nil (also for an entry dlock did not write).
-- It does not look at the deadline.
local function lease_of(main, tok)
  local n, fence, since, meta = string.match(redis.call('HGET', main, tok) or '', '^(%d+) (%d+) (%d+) (.*)$')
  if not n then
    return nil
  end
  return {n = tonumber(n), fence = tonumber(fence), since = tonumber(since), meta = meta}
end

-- drop_lease takes tok's lease of n permits out of the two keys at now_ms,
-- and removes both when no permit is held any more.
local function drop_lease(main, leases, tok, n, now_ms)
  redis.call('ZREM', leases, tok)
  redis.call('HDEL', main, tok)
  if redis.call('HINCRBY', main, 'used', -n) <= 0 then
    redis.call('DEL', main, leases)
  elseif redis.call('PTTL', main) == -1 then
    -- The lease let go may have been one that never expires: the keys
    -- now live as long as the longest lease left, no longer.
    expire_by_last(leases, now_ms, main, leases)
  end
end

-- permits_in_use drops the leases whose deadline passed by now_ms (at most
-- 100 per call, as prune_waiters does) and returns the permits the rest
-- hold.
local function permits_in_use(main, leases, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', leases, '-inf', now_ms, 'LIMIT', 0, 100)
  for _, tok in ipairs(dead) do
    local l = lease_of(main, tok)
    drop_lease(main, leases, tok, l and l.n or 0, now_ms)
  end
  local used = tonumber(redis.call('HGET', main, 'used') or '0')
  if used > 0 and redis.call('EXISTS', leases) == 0 then
    -- The leases are gone without the count (an operator, or eviction
    -- under a volatile-* policy): their permits would never come back.
    redis.call('DEL', main)
    return 0
  end
  return used
end

-- live_lease returns tok's lease (see lease_of) if its deadline has not
-- passed by now_ms, else nil, dropping an expired one that
-- permits_in_use left for a later call: a lease that ran out is never
-- taken up again, not even by a try sent again with its token.
local function live_lease(main, leases, tok, now_ms)
  local l = lease_of(main, tok)
  if not l then
    return nil
  end
  local deadline = redis.call('ZSCORE', leases, tok)
  if deadline == 'inf' or (deadline and tonumber(deadline) > now_ms) then
    return l
  end
  drop_lease(main, leases, tok, l.n, now_ms)
  return nil
end

-- deadline_of is a lease's deadline in the leases zset for a TTL of ttl_ms
-- (0: never) from now_ms.
local function deadline_of(ttl_ms, now_ms)
  if ttl_ms > 0 then
    return int(now_ms + ttl_ms)
  end
  return 'inf'
end

-- add_lease records tok's lease of n permits, issued with fence at now
-- (µs) by a caller of the given size, until deadline (see deadline_of).
local function add_lease(main, leases, tok, n, size, fence, now, meta, deadline)
  local now_ms = math.floor(now / 1000)
  redis.call('HSET', main, tok, table.concat({int(n), int(fence), int(now_ms), meta}, ' '), 'size', size)
  redis.call('HINCRBY', main, 'used', n)
  redis.call('ZADD', leases, deadline, tok)
  expire_by_last(leases, now_ms, main, leases)
end

-- grant_waiters hands the permits free at now (µs), used of them being in
-- use, to the live waiters in queue order, each as long as all it asks
-- fits under its own size, and stops at the first that does not fit, so
-- that a large request holds back those behind it and is never starved.
-- Each granted waiter holds its lease until its liveness deadline (its
-- first renewal sets its own TTL), leaves the queue, and is told on
-- channel (sent with publish) by "<token> <fence> <now µs>", as hand_over
-- tells a Mutex's waiter. At most 100 per call. It returns the permits in
-- use after the grants.
local function grant_waiters(keys, publish, channel, now, used)
  local main, fence_key, leases, queue, alive, wmeta = unpack(keys)
  prune_waiters(queue, alive, wmeta, math.floor(now / 1000))
  for _ = 1, 100 do
    local tok = first_waiter(queue)
    if not tok then
      break
    end
    local n, size, meta = string.match(redis.call('HGET', wmeta, tok) or '', '^(%d+):(%d+):(.*)$')
    n = tonumber(n)
    if not n or n > tonumber(size) - used then
      break
    end
    local deadline = redis.call('ZSCORE', alive, tok)
    drop_waiters(queue, alive, wmeta, {tok})
    local fence = issue_fence(fence_key, now)
    add_lease(main, leases, tok, n, size, fence, now, meta, deadline)
    used = used + n
    redis.call(publish, channel, table.concat({tok, int(fence), int(now)}, ' '))
  end
  return used
end
