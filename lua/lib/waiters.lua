-- waiters.lua: the queue of waiters of a Mutex or FairMutex, and the
-- writers' intentions and readers of an RWMutex, kept as three keys: the
-- queue (zset token -> order), liveness (zset token -> deadline, server
-- ms) and metadata (hash token -> metadata).

-- drop_waiters takes the tokens given after the keys out of the three
-- keys (one or many: no table is built for one).
local function drop_waiters(queue, alive, wmeta, ...)
  redis.call('ZREM', queue, ...)
  redis.call('ZREM', alive, ...)
  redis.call('HDEL', wmeta, ...)
end

-- prune_waiters drops queued waiters whose liveness deadline (score in the
-- alive set, ms) has passed: a waiter that died is skipped after its
-- liveness timeout, not after a lock TTL. At most 100 per call, to bound
-- the script's run time; the rest go on the next call. An RWMutex's
-- readers are pruned with it too: their expiry set is the alive set.
-- now_ms is the server's clock in ms as a decimal string (the common
-- case, nothing to prune, then makes and reads no number). It returns how
-- many it dropped.
local function prune_waiters(queue, alive, wmeta, now_ms)
  local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', now_ms, 'LIMIT', '0', '100')
  if #dead > 0 then
    drop_waiters(queue, alive, wmeta, unpack(dead))
  end
  return #dead
end

-- first_waiter returns the first token in queue and its score (a
-- queue's arrival order in µs; an RWMutex reader's fence), or nil.
local function first_waiter(queue)
  local head = redis.call('ZRANGE', queue, '0', '0', 'WITHSCORES')
  return head[1], tonumber(head[2])
end

-- live_first returns the first token in queue, its score and its
-- liveness deadline (server ms, the string read) once waiters past their
-- deadline are pruned, given first and order, what first_waiter read
-- before (first nil: nothing queued, nothing to prune; nil is returned).
-- It reads the queue again only when it dropped a waiter. A first waiter
-- with no deadline at all (something else removed it: an operator, or an
-- eviction of the liveness key alone) is dropped as well, as good as
-- dead, since no prune would ever drop it (it learns so at its next
-- heartbeat, and queues again). The waiter returned may be dead still
-- when more dead waiters lay ahead than one prune takes; and after a
-- hundred without a deadline, it is returned with none (nil).
local function live_first(queue, alive, wmeta, first, order, now_ms)
  if first and prune_waiters(queue, alive, wmeta, int(now_ms)) > 0 then
    first, order = first_waiter(queue)
  end
  for _ = 1, 100 do
    if not first then
      return nil
    end
    local deadline = redis.call('ZSCORE', alive, first)
    if deadline then
      return first, order, deadline
    end
    drop_waiters(queue, alive, wmeta, first)
    first, order = first_waiter(queue)
  end
  return first, order, nil
end

-- barging reports whether a newcomer may still take a free lock ahead of
-- the first waiter, which arrived at order: while it has waited less than
-- starve_us at now (µs), as with sync.Mutex (starve_us 0: never).
local function barging(order, now, starve_us)
  return starve_us > 0 and now - order < starve_us
end

-- may_take reports whether tok may take a free lock at now (µs), given
-- head and order, the first live waiter and its arrival: when nobody
-- waits, tok is first, or a newcomer may still barge in (see barging).
local function may_take(head, order, tok, now, starve_us)
  return head == nil or head == tok or barging(order, now, starve_us)
end

-- client_channel is the channel, beside channel, on which the waiters of
-- tok's client hear their hand-offs and wake-ups: channel, '~' and the
-- token's first 8 hex digits, which name its client (token.Of and
-- keys.ClientChannel in Go). So a hand-off wakes the one process whose
-- waiter it is for, not every process waiting for the lock.
local function client_channel(channel, tok)
  return channel .. '~' .. string.sub(tok, 1, 8)
end

-- wake_to_barge reports whether a newcomer may still take what is let go
-- at now (µs) ahead of tok, the first live waiter for it, which arrived at
-- order (see barging); if so, it wakes tok by "<token>" on to, its
-- channel (sent with publish), to try for it, instead of having it handed
-- over.
local function wake_to_barge(tok, order, now, publish, to, starve_us)
  if barging(order, now, starve_us) then
    -- Never fail on it: the release is done by then, and a waiter not
    -- woken tries at its next heartbeat.
    redis.pcall(publish, to, tok)
    return true
  end
  return false
end

-- join_queue puts tok at the end of queue unless it is there already,
-- and renews its liveness deadline to now_ms + live_ms: a waiter's try is
-- its heartbeat. The queue's keys live as long as a waiter heartbeats, no
-- longer. Arrival order is the server clock (µs), strictly rising. When
-- keep_only is set (a heartbeat, see try_now) it only renews the place of
-- a tok already queued (see keep_place). It returns whether tok is queued.
local function join_queue(queue, alive, wmeta, tok, meta, now, live_ms, keep_only)
  if keep_only then
    return keep_place(queue, alive, wmeta, tok, int(math.floor(now / 1000) + live_ms), live_ms)
  end
  -- NX: a waiter queued already keeps its place.
  local last = redis.call('ZRANGE', queue, '-1', '-1', 'WITHSCORES')[2]
  local order = now
  if last then
    order = next_fence(tonumber(last), now)
  end
  if redis.call('ZADD', queue, 'NX', int(order), tok) == 1 then
    redis.call('HSET', wmeta, tok, meta)
  end
  redis.call('ZADD', alive, int(math.floor(now / 1000) + live_ms), tok)
  extend_queue(queue, alive, wmeta, live_ms, not last)
  return true
end

-- keep_place renews the liveness deadline of tok to deadline (server ms,
-- a decimal string: now and the liveness timeout live_ms), if tok is
-- queued (in alive as in queue: they change together), and returns
-- whether it is: a waiter's heartbeat (see extend_queue for the keys'
-- expiry).
local function keep_place(queue, alive, wmeta, tok, deadline, live_ms)
  -- CH counts a score changed; 0 when tok is absent, or renewed this ms.
  if redis.call('ZADD', alive, 'XX', 'CH', deadline, tok) == 0 and not redis.call('ZSCORE', alive, tok) then
    return false
  end
  extend_queue(queue, alive, wmeta, live_ms)
  return true
end

-- extend_queue makes the three keys of a queue live 2 * live_ms, past the
-- liveness deadline of every waiter in it, when they would end sooner
-- than live_ms from now, or when made is set (the queue was empty: a join
-- just made it): so that most joins and heartbeats write none of them.
-- The keys change together (the same tokens go in and out of all three,
-- and their expiries are set here alone), so the liveness key's TTL is
-- theirs: -1 when they were just made, -2 when there are none. A queue
-- made anew while the others lived on (an operator deleted it alone) is
-- given their expiry at once, not left without one.
local function extend_queue(queue, alive, wmeta, live_ms, made)
  if not made and redis.call('PTTL', alive) >= live_ms then
    return
  end
  local twice = int(2 * live_ms)
  redis.call('PEXPIRE', queue, twice)
  redis.call('PEXPIRE', alive, twice)
  redis.call('PEXPIRE', wmeta, twice)
end

-- beat_queue is the heartbeat of tok, a waiter queued for the lock whose
-- owner key (holding v, as read; false: free) and queue keys are given,
-- at now_ms, with the liveness timeout live_ms and the deadline it makes
-- (a decimal string, made once for a batch of heartbeats, see
-- queue_beats.lua): it renews the waiter's place (see keep_place) and tells it
-- when to try unasked, as a refused try would (the holder's lease now
-- runs out then: a holder that keeps renewing wakes no waiter). It takes
-- nothing and touches no lease, so one that arrives late (sent in a
-- batch before its waiter took the lock or left) changes nothing, but
-- pruning the dead ahead of a free lock. It returns the ms to wait
-- (-1: only when woken) and the holder's fence (a decimal string; 0 when
-- free); 0, 0 (see try_now) when a try would do more: the lock was
-- handed to tok, or is free for it, or tok is queued no more.
local function beat_queue(owner, v, queue, alive, wmeta, tok, live_ms, now_ms, deadline)
  if held_by(v, tok) then
    return 0, 0
  end
  local wait, fence
  if v then
    -- Held by another: its fence, read alone, as holder_of reads it (0
    -- from a value dlock did not write).
    fence = string.match(v, '^%S+ (%d+) %d+ ') or '0'
  else
    -- Free: once the dead ahead are pruned, the first waiter takes the
    -- lock, or is pruned at its liveness deadline.
    local head, order = first_waiter(queue)
    local until_ms
    head, order, until_ms = live_first(queue, alive, wmeta, head, order, now_ms)
    wait = head and head ~= tok and tonumber(until_ms or '0') - now_ms
    if not wait or wait <= 0 then
      return 0, 0
    end
  end
  if not keep_place(queue, alive, wmeta, tok, deadline, live_ms) then
    return 0, 0
  end
  return wait or redis.call('PTTL', owner), fence or 0
end

-- try_now is the reply of a waiter's heartbeat (a try script asked only
-- to renew the waiter's place, never to take the lock or join the queue;
-- beat_queue's 0, 0 is the same) when a try would do more: the lock is
-- free for the waiter to take, was handed to it, or it is queued no more.
-- It reads as a refusal whose wait is over at once, from an unknown
-- holder. now is the server's time in µs, a number or a decimal string
-- (see clock_us): the client reads either.
local function try_now(now)
  return {0, 0, 0, now}
end

-- withdraw takes tok out of the queue, and returns whether it was in it
-- and whether it was first.
local function withdraw(queue, alive, wmeta, tok)
  local first = first_waiter(queue) == tok
  local removed = redis.call('ZREM', queue, tok) == 1
  redis.call('ZREM', alive, tok)
  redis.call('HDEL', wmeta, tok)
  return removed, first
end

-- live_waiters lists the waiters of queue alive at now_ms, in order, as a
-- flat list of {metadata, arrived at (server ms)}, for a status reply.
local function live_waiters(queue, alive, wmeta, now_ms)
  local q = redis.call('ZRANGE', queue, '0', '-1', 'WITHSCORES')
  local out = {}
  for i = 1, #q, 2 do
    local deadline = tonumber(redis.call('ZSCORE', alive, q[i]) or '0')
    if deadline > now_ms then
      table.insert(out, redis.call('HGET', wmeta, q[i]) or '')
      table.insert(out, math.floor(tonumber(q[i + 1]) / 1000))
    end
  end
  return out
end

-- wake_args splits the argument in which a release or a leave is told
-- how to hand the lock over, "<starve_us> <publish> <channel>" (see
-- queue_release.lua), into starve_us, a number, and the publish command
-- and the channel. One argument rather than three: Redis reads each
-- argument of every call, and most releases have nobody to hand to. An
-- argument of another form fails the script, which callers read before
-- they write anything.
local function wake_args(s)
  local starve_us, publish, channel = string.match(s, '^(%d+) (%S+) (.*)$')
  if not channel then
    error('dlock: hand-over argument of an unknown form: ' .. s)
  end
  return tonumber(starve_us), publish, channel
end

-- hand_over gives a lock its holder has just let go straight to the first
-- live waiter, so that a hand-off costs one message: the waiter is made
-- the holder, with a fence, until its liveness deadline (a granted waiter
-- that died delays the lock no longer than a queued one would), is taken
-- out of the queue, and is told on its client's channel beside channel
-- (see client_channel; sent with publish, PUBLISH or SPUBLISH) by
-- "<token> <fence> <now µs>". Its first renewal sets its own
-- TTL. While the first waiter has waited less than starve_us the lock
-- stays as it was instead, and the waiter is woken by "<token>" to try
-- for it: a newcomer may take it meanwhile (Mutex). The owner key must be
-- free or still hold the lease let go: a hand-over writes it whole. tok
-- and order are the first waiter and its arrival as first_waiter read
-- them (nil: nobody waits). It returns the token it handed the lock to,
-- or nil.
local function hand_over(owner, fence_key, queue, alive, wmeta, publish, channel, starve_us, tok, order)
  if not tok then
    return nil
  end
  local clock = clock_us()
  local now = tonumber(clock)
  local now_ms = math.floor(now / 1000)
  -- The lock is kept for the waiter until its liveness deadline. The dead
  -- in the line are pruned when the first is one of them, or has no
  -- deadline (those behind a live first are pruned when they come first).
  local deadline = redis.call('ZSCORE', alive, tok)
  if not deadline or tonumber(deadline) <= now_ms then
    tok, order, deadline = live_first(queue, alive, wmeta, tok, order, now_ms)
    -- (It may have passed still when more dead waiters lay ahead than
    -- one prune takes: the lock is then free again at once.)
  end
  if not deadline then
    return nil
  end
  local to = client_channel(channel, tok)
  if wake_to_barge(tok, order, now, publish, to, starve_us) then
    return nil
  end
  local meta = redis.call('HGET', wmeta, tok) or ''
  drop_waiters(queue, alive, wmeta, tok)
  local fence = issue_fence(fence_key, clock)
  redis.call('SET', owner, owner_value(tok, fence, clock, '', meta), 'PXAT', deadline)
  redis.call(publish, to, tok .. ' ' .. fence .. ' ' .. clock)
  return tok
end
