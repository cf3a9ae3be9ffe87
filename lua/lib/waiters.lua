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

-- wake_first tells the first waiter in queue, if any, that it may take the
-- lock: a message on channel, sent with publish (PUBLISH or SPUBLISH),
-- naming its token.
local function wake_first(queue, publish, channel)
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if head then
    redis.call(publish, channel, head)
  end
end
