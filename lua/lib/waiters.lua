-- waiters.lua: the queue of waiters of a Mutex or FairMutex, and the
-- writers' intentions and readers of an RWMutex, kept as three keys: the
-- queue (zset token -> order), liveness (zset token -> deadline, server
-- ms) and metadata (hash token -> metadata).

-- drop_waiters takes the tokens in the list toks out of the three keys.
local function drop_waiters(queue, alive, wmeta, toks)
  redis.call('ZREM', queue, unpack(toks))
  redis.call('ZREM', alive, unpack(toks))
  redis.call('HDEL', wmeta, unpack(toks))
end

-- prune_waiters drops queued waiters whose liveness deadline (score in the
-- alive set, ms) has passed: a waiter that died is skipped after its
-- liveness timeout, not after a lock TTL. At most 100 per call, to bound
-- the script's run time; the rest go on the next call. An RWMutex's
-- readers are pruned with it too: their expiry set is the alive set.
-- It returns how many it dropped.
local function prune_waiters(queue, alive, wmeta, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', now_ms, 'LIMIT', 0, 100)
  if #dead > 0 then
    drop_waiters(queue, alive, wmeta, dead)
  end
  return #dead
end

-- first_waiter returns the first token in queue and its score (a
-- queue's arrival order in µs; an RWMutex reader's fence), or nil.
local function first_waiter(queue)
  local head = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
  return head[1], tonumber(head[2])
end

-- live_first returns the first token in queue and its score once waiters
-- past their liveness deadline are pruned, given first and order, what
-- first_waiter read before (first nil: nothing queued, nothing to prune).
-- It reads the queue again only when it pruned.
local function live_first(queue, alive, wmeta, first, order, now_ms)
  if first and prune_waiters(queue, alive, wmeta, now_ms) > 0 then
    return first_waiter(queue)
  end
  return first, order
end

-- hand_over frees the lock of a holder that let it go, or hands it straight
-- to the first live waiter, so that a hand-off costs one message: the
-- waiter is made the holder, with a fence, until its liveness deadline (a
-- granted waiter that died delays the lock no longer than a queued one
-- would), is taken out of the queue, and is told on channel (sent with
-- publish, PUBLISH or SPUBLISH) by "<token> <fence> <now µs>". Its first
-- renewal sets its own TTL. While the first waiter has waited less than
-- starve_us the lock is freed instead, and the waiter woken by "<token>"
-- to try for it: a newcomer may take it meanwhile (Mutex).
local function hand_over(owner, fence_key, queue, alive, wmeta, publish, channel, starve_us)
  local tok, order = first_waiter(queue)
  local now
  if tok then
    now = now_us()
    tok, order = live_first(queue, alive, wmeta, tok, order, math.floor(now / 1000))
  end
  if not tok or now - order < starve_us then
    redis.call('DEL', owner)
    if tok then
      redis.call(publish, channel, tok)
    end
    return
  end
  local live = tonumber(redis.call('ZSCORE', alive, tok)) - math.floor(now / 1000)
  local meta = redis.call('HGET', wmeta, tok) or ''
  drop_waiters(queue, alive, wmeta, {tok})
  local fence = issue_fence(fence_key, now)
  redis.call('SET', owner, owner_value(tok, fence, now, '', meta), 'PX', live)
  redis.call(publish, channel, table.concat({tok, int(fence), int(now)}, ' '))
end
