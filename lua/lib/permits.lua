-- permits.lua: the leases of a Semaphore, kept as two keys, and the
-- hand-over of freed permits to its queue of waiters (see waiters.lua).
-- The main key is a hash: field 'used' counts the permits the live leases
-- hold, field 'size' is the size the latest acquisition asked under, and
-- each lease's token (32 hex digits, never a word) maps to
-- "<permits> <fence> <since ms> <metadata>". The leases key is a zset
-- token -> deadline (server ms; inf: never). Both live as long as the
-- longest lease. A waiter's metadata entry is "<permits>:<size>:<meta>".

-- parse_lease reads a lease's entry in the main hash (false or nil: none)
-- into {n, fence, since, meta}, or returns nil (also for an entry dlock
-- did not write). n is a number; fence and since (ms) are the decimal
-- strings read, which every reply carries as they are.
local function parse_lease(v)
  local n, fence, since, meta = string.match(v or '', '^(%d+) (%d+) (%d+) (.*)$')
  if not n then
    return nil
  end
  return {n = tonumber(n), fence = fence, since = since, meta = meta}
end

-- lease_of returns tok's lease in the main hash (see parse_lease). It does
-- not look at the deadline.
local function lease_of(main, tok)
  return parse_lease(redis.call('HGET', main, tok))
end

-- end_lease takes tok's lease of n permits out of the main hash at now_ms
-- (server ms, a decimal string), its deadline being out of the leases
-- key already, and removes both keys when no permit is held any more.
-- used, when the caller has read it, is the count of permits in use with
-- this lease's: when they are all this lease's, both keys go at once.
local function end_lease(main, leases, tok, n, now_ms, used)
  if used and used <= n then
    redis.call('DEL', main, leases)
    return
  end
  redis.call('HDEL', main, tok)
  if redis.call('HINCRBY', main, 'used', int(-n)) <= 0 then
    redis.call('DEL', main, leases)
  elseif redis.call('PTTL', main) == -1 then
    -- The lease let go may have been one that never expires: the keys
    -- now live as long as the longest lease left, no longer.
    expire_by_last(leases, tonumber(now_ms), nil, nil, main, leases)
  end
end

-- drop_lease takes tok's lease of n permits out of the two keys at now_ms
-- (see end_lease).
local function drop_lease(main, leases, tok, n, now_ms)
  redis.call('ZREM', leases, tok)
  end_lease(main, leases, tok, n, now_ms)
end

-- sem_due lists the tokens of the leases whose deadline passed by now_ms
-- (server ms, a decimal string), earliest first: at most 100, as
-- prune_waiters drops, to bound the script's run time.
local function sem_due(leases, now_ms)
  return redis.call('ZRANGEBYSCORE', leases, '-inf', now_ms, 'LIMIT', '0', '100')
end

-- permits_and_lease drops the leases due (listed by sem_due; nil: listed
-- here) at now_ms (server ms, a decimal string) and returns the permits
-- the rest hold, and tok's lease if it is live, else nil. v is what
-- HMGET of the main hash's 'used' and tok read before the drop (nil:
-- read here), read again if any lease was dropped. A lease of tok that
-- ran out but was left for a later call is dropped too: a lease that ran
-- out is never taken up again, not even by a try sent again with its
-- token. Deadlines are compared with now_ms as strings (exceeds).
local function permits_and_lease(main, leases, tok, now_ms, due, v)
  due = due or sem_due(leases, now_ms)
  for _, t in ipairs(due) do
    local l = lease_of(main, t)
    if l then
      drop_lease(main, leases, t, l.n, now_ms)
    else
      -- No count to take it from: the main key expired or was lost apart
      -- from the leases (HINCRBY would refuse -0 besides).
      redis.call('ZREM', leases, t)
    end
  end
  if #due > 0 or not v then
    v = redis.call('HMGET', main, 'used', tok)
  end
  local used, l = tonumber(v[1] or '0'), parse_lease(v[2])
  if l then
    local deadline = redis.call('ZSCORE', leases, tok)
    if deadline ~= 'inf' and not (deadline and exceeds(deadline, now_ms)) then
      drop_lease(main, leases, tok, l.n, now_ms)
      used, l = used - l.n, nil
    end
  end
  if used > 0 and redis.call('EXISTS', leases) == 0 then
    -- The leases are gone without the count (an operator, or eviction
    -- under a volatile-* policy): their permits would never come back.
    redis.call('DEL', main)
    return 0, nil
  end
  return used, l
end

-- outlive makes the two keys live at least left ms more (a decimal
-- string; false: for ever). fresh says that the keys were just made (no
-- permit was held before), so have no expiry yet; otherwise one that
-- lives longer keeps its expiry (PEXPIRE GT), and one without any (a
-- lease that never expires holds) keeps none.
local function outlive(main, leases, left, fresh)
  for _, k in ipairs({main, leases}) do
    if not left then
      redis.call('PERSIST', k)
    elseif fresh then
      redis.call('PEXPIRE', k, left)
    else
      redis.call('PEXPIRE', k, left, 'GT')
    end
  end
end

-- add_lease records tok's lease of n permits (a decimal string), issued
-- with fence (a decimal string, see issue_fence) at now_ms (server ms, a
-- decimal string) by a caller of the given size, until deadline, left ms
-- from now (see deadline_of); fresh says that no permit was held before
-- (then the count is set, not added to).
local function add_lease(main, leases, tok, n, size, fence, now_ms, meta, deadline, left, fresh)
  local v = n .. ' ' .. fence .. ' ' .. now_ms .. ' ' .. meta
  if fresh then
    redis.call('HSET', main, tok, v, 'size', size, 'used', n)
  else
    redis.call('HSET', main, tok, v, 'size', size)
    redis.call('HINCRBY', main, 'used', n)
  end
  redis.call('ZADD', leases, deadline, tok)
  outlive(main, leases, left, fresh)
end

-- grant_waiters hands the permits free at the server's clock (µs, a
-- decimal string: see clock_us), used of them being in use, to the live
-- waiters in queue order, each as long as all it asks
-- fits under its own size, and stops at the first that does not fit, so
-- that a large request holds back those behind it and is never starved.
-- Each granted waiter holds its lease until its liveness deadline (its
-- first renewal sets its own TTL), leaves the queue, and is told on its
-- client's channel beside channel (see client_channel; sent with
-- publish) by "<token> <fence> <now µs>", as hand_over
-- tells a Mutex's waiter. At most 100 per call. It returns the permits in
-- use after the grants.
local function grant_waiters(keys, publish, channel, clock, used)
  local main, fence_key, leases, queue, alive, wmeta = unpack(keys)
  local ms = string.sub(clock, 1, -4) -- the clock's ms
  local now_ms = tonumber(ms)
  prune_waiters(queue, alive, wmeta, ms)
  for _ = 1, 100 do
    local tok = first_waiter(queue)
    if not tok then
      break
    end
    local ns, size, meta = string.match(redis.call('HGET', wmeta, tok) or '', '^(%d+):(%d+):(.*)$')
    local n, most = tonumber(ns), tonumber(size)
    if n and (n < 1 or n > most) then
      n = nil -- none, or more than its own size: dlock never asks so
    elseif n and n > most - used then
      break
    end
    local deadline = n and redis.call('ZSCORE', alive, tok)
    -- Granted, or dropped: queued with a request dlock did not write, or
    -- with no deadline (something else wrote or removed it), as good as
    -- dead (see live_first), it would hold back everyone behind it for
    -- ever; it learns so at its next heartbeat, and queues again. (A first
    -- waiter that does not fit is checked by those behind it: see
    -- sem_acquire.lua.)
    drop_waiters(queue, alive, wmeta, tok)
    if deadline then
      local left = int(math.max(1, tonumber(deadline) - now_ms))
      local fence = issue_fence(fence_key, clock)
      add_lease(main, leases, tok, ns, size, fence, ms, meta, deadline, left, used == 0)
      used = used + n
      redis.call(publish, client_channel(channel, tok), tok .. ' ' .. fence .. ' ' .. clock)
    end
  end
  return used
end
