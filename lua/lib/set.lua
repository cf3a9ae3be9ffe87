-- set.lua: the members and leases of a MutexSet.
--
-- MutexSet scripts share one KEYS layout, built in Client.MutexSet. A
-- member is in exactly one of free and held while it is in the set.
--   KEYS[1]  members: zset, every score 0 (membership; listing in name order)
--   KEYS[2]  free: zset member -> time its last lease ended (server µs;
--            0 = never used), so the first is the least recently used
--   KEYS[3]  held: zset member -> lease expiry (server ms; inf = never)
--   KEYS[4]  owner: hash member -> token of the lease holding it
--   KEYS[5]  leases: hash token -> member (a retried acquire finds its own)
--   KEYS[6]  meta: hash member -> holder's metadata (absent when empty)
--   KEYS[7]  since: hash member -> acquired at (server ms)
--   KEYS[8]  fences: hash member -> last fence issued for it
--   KEYS[9]  removing: set of members removed while held
--   KEYS[10] last: the highest fence issued in the set (changes whenever
--            a member changes hands, but for a clock stepped back); a
--            member with no fence of its own (new, or removed and added
--            again) starts above it, and it outlives an emptied set while
--            it can be ahead of the clock (see keep_fence)
--   KEYS[11] the waiters' queue: zset token -> arrival order (see waiters.lua)
--   KEYS[12] their liveness: zset token -> deadline (server ms)
--   KEYS[13] what they wait for: hash token -> "<n>:<member><metadata>",
--            the member n bytes long ('' for any member)
-- On a single Redis only KEYS[1] is sent: the script names the others,
-- KEYS[1] and ':free', ':held' and so on, before it starts (loadNaming
-- in scripts.go). The set's waiters listen on its channel, those waiting for a named
-- member on the member's: the set's channel, ':' and the member
-- (keys.MemberChannel).

-- set_owns reports whether the lease tok holds member m.
local function set_owns(m, tok)
  return redis.call('HGET', KEYS[4], m) == tok
end

-- set_expiry returns member m's lease expiry in server ms (math.huge when
-- it never expires), or nil when m is not held.
local function set_expiry(m)
  local s = redis.call('ZSCORE', KEYS[3], m)
  if not s then
    return nil
  end
  if s == 'inf' then
    return math.huge
  end
  return tonumber(s)
end

-- set_forget drops member m from the set. Once the set has no member left
-- every key of its members goes, but its highest fence, kept while it can
-- still be ahead of the clock: so an emptied set leaves nothing behind
-- for long, and a member added again gets fences above its old ones. The
-- waiters' keys stay, with their places (they wait for an Add), and
-- expire with the last waiter's liveness.
local function set_forget(m)
  redis.call('ZREM', KEYS[1], m)
  redis.call('ZREM', KEYS[2], m)
  redis.call('HDEL', KEYS[8], m)
  redis.call('SREM', KEYS[9], m)
  if redis.call('ZCARD', KEYS[1]) == 0 then
    local last = redis.call('GET', KEYS[10])
    redis.call('DEL', unpack(KEYS, 1, 10))
    if last then
      keep_fence(KEYS[10], tonumber(last), now_us())
    end
  end
end

-- set_end_with_leases gives the set's keys the end of the last lease
-- held in it: a ms after it, and the set's highest fence a minute after
-- that (as keep_fence keeps it); none while a lease never expires. For a
-- set whose every member left is being removed (see set_fade).
local function set_end_with_leases()
  local top = redis.call('ZRANGE', KEYS[3], '-1', '-1', 'WITHSCORES')[2]
  if not top then
    return
  end
  if top == 'inf' then
    for i = 1, 10 do
      redis.call('PERSIST', KEYS[i])
    end
    return
  end
  local at = math.max(tonumber(top), time_ms()) + 1
  for i = 1, 9 do
    redis.call('PEXPIREAT', KEYS[i], int(at))
  end
  local last = redis.call('GET', KEYS[10])
  if last then
    redis.call('PEXPIREAT', KEYS[10], int(math.max(at, math.ceil(tonumber(last) / 1000)) + 60000))
  end
end

-- set_fade gives the set's keys an end once every member left in it is
-- being removed (each held, and leaving when its lease ends): they end
-- with the last of those leases (see set_end_with_leases), so a set whose
-- last holders died leaves nothing behind for good. O(r) for the r
-- members being removed: call it after a removal, and when a member being
-- removed leaves; set_follow keeps the end after a lease is extended, and
-- set_keep undoes it.
local function set_fade()
  local n = redis.call('ZCARD', KEYS[1])
  if n > 0 and n == #redis.call('SMEMBERS', KEYS[9]) then
    set_end_with_leases()
  end
end

-- set_follow moves the end set_fade gave the set's keys (if it did: then
-- the members key expires) after the lease on member m was extended, if m
-- is being removed. One command for a member that is not.
local function set_follow(m)
  if redis.call('SISMEMBER', KEYS[9], m) == 1 and redis.call('PTTL', KEYS[1]) >= 0 then
    set_end_with_leases()
  end
end

-- set_keep makes the keys of a set that set_fade gave an end lasting
-- again: a member was added, or its removal cancelled.
local function set_keep()
  if redis.call('PERSIST', KEYS[1]) == 1 then
    for i = 2, 10 do
      redis.call('PERSIST', KEYS[i])
    end
  end
end

-- set_unhold ends the holding of member m by the lease tok (nil: the
-- holder is read here), leaving m neither held nor free: the caller then
-- makes it free (ZADD to KEYS[2], with its time of last use), or drops it
-- from the set.
local function set_unhold(m, tok)
  tok = tok or redis.call('HGET', KEYS[4], m)
  if tok then
    redis.call('HDEL', KEYS[5], tok)
  end
  redis.call('ZREM', KEYS[3], m)
  redis.call('HDEL', KEYS[4], m)
  redis.call('HDEL', KEYS[6], m)
  redis.call('HDEL', KEYS[7], m)
end

-- set_vacate ends the holding of member m (a release, or an expiry found
-- late) and makes m free with the given time of last use (server µs, a
-- decimal string), or drops it if it was removed while held. tok is the
-- token holding m when the caller has read it (nil: read here), removing
-- whether m is being removed when the caller has looked (nil: looked at
-- here). Returns true when m is free now.
local function set_vacate(m, used_us, tok, removing)
  set_unhold(m, tok)
  if removing == nil then
    removing = redis.call('SISMEMBER', KEYS[9], m) == 1
  end
  if removing then
    set_forget(m)
    set_fade() -- a lease that never expired may have kept the keys
    return false
  end
  redis.call('ZADD', KEYS[2], used_us, m)
  return true
end

-- set_due lists the members whose lease expired by now_ms (server ms, a
-- decimal string), earliest expiry first, each followed by its expiry:
-- at most 100, to bound the script's run time; the rest come next time.
local function set_due(now_ms)
  return redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms, 'WITHSCORES', 'LIMIT', '0', '100')
end

-- set_reclaim frees the members set_due listed, each with its expiry as
-- its time of last use (the score's digits and three zeros: the scores
-- of held members are whole ms).
local function set_reclaim(due)
  for i = 1, #due, 2 do
    set_vacate(due[i], due[i + 1] .. '000')
  end
end

-- set_grant gives the free member m to the lease tok at the server's time
-- now (µs), clock as a decimal string (see clock_us), and returns its
-- fence as a decimal string: max(last + 1, now), above every fence m had
-- before, expired or not (last: m's own, or for a member with none the
-- set's highest); the clock itself when it has passed it (see exceeds). ttl is in ms, 0 for a lease that never expires. The
-- expiry is rounded up to the next ms: Redis must keep the lease at least
-- ttl. from is the token of a lease let go that still holds m, whose
-- entries the grant writes over (a hand-over); nil for a free member.
local function set_grant(m, tok, ttl, meta, now, clock, from)
  local fs = clock
  local last = redis.call('HGET', KEYS[8], m) or redis.call('GET', KEYS[10])
  if not exceeds(clock, last) then
    fs = int(tonumber(last) + 1)
  end
  redis.call('HSET', KEYS[8], m, fs)
  local highest = redis.call('SET', KEYS[10], fs, 'GET')
  if highest and not exceeds(fs, highest) then
    redis.call('SET', KEYS[10], highest) -- a clock stepped back
  end
  if from then
    redis.call('HDEL', KEYS[5], from)
  else
    redis.call('ZREM', KEYS[2], m)
  end
  local expiry = '+inf'
  if ttl > 0 then
    expiry = int(math.ceil(now / 1000) + ttl)
  end
  redis.call('ZADD', KEYS[3], expiry, m)
  redis.call('HSET', KEYS[4], m, tok)
  redis.call('HSET', KEYS[5], tok, m)
  -- (The ms of now are the clock's digits but the last three.)
  redis.call('HSET', KEYS[7], m, string.sub(clock, 1, -4))
  if meta ~= '' then
    redis.call('HSET', KEYS[6], m, meta)
  elseif from then
    redis.call('HDEL', KEYS[6], m)
  end
  return fs
end

-- set_waiter splits a waiter's entry in KEYS[13] into the member it
-- waits for ('' for any) and its metadata; nil for an entry dlock did not
-- write, or none (dlock writes one for every waiter, "0:" for any member:
-- a waiter whose entry is gone may wait for one member alone).
local function set_waiter(v)
  if not v then
    return nil
  end
  local n, rest = string.match(v, '^(%d+):(.*)$')
  if not n then
    return nil
  end
  n = tonumber(n)
  return string.sub(rest, 1, n), string.sub(rest, n + 1)
end

-- set_first_for returns the first live waiter that would take member m
-- (one waiting for m or for any member), its arrival order, its entry
-- and its liveness deadline (server ms, the string read), looking at the
-- first 100 waiters and none from stop on, and passing over those in skip
-- (a table of tokens, or nil); when there is none, nil and whether the
-- look ended at the 100th waiter with more behind it, who may want m.
-- Dead waiters must have been pruned; one queued with no deadline at all,
-- or with an entry dlock cannot read (something else removed or wrote
-- it), is dropped on the way, as good as dead (see live_first in
-- waiters.lua).
local function set_first_for(m, stop, skip)
  local q = redis.call('ZRANGE', KEYS[11], '0', '99', 'WITHSCORES')
  if #q == 0 then
    return nil
  end
  local toks = {}
  for i = 1, #q, 2 do
    toks[#toks + 1] = q[i]
  end
  local entries = redis.call('HMGET', KEYS[13], unpack(toks))
  for i, tok in ipairs(toks) do
    if tok == stop then
      return nil
    end
    local want = set_waiter(entries[i])
    if skip and skip[tok] then
      -- passed over
    elseif want == nil then
      drop_waiters(KEYS[11], KEYS[12], KEYS[13], tok)
    elseif want == '' or want == m then
      local deadline = redis.call('ZSCORE', KEYS[12], tok)
      if deadline then
        return tok, tonumber(q[2 * i]), entries[i], deadline
      end
      drop_waiters(KEYS[11], KEYS[12], KEYS[13], tok)
    end
  end
  return nil, #q == 200 and redis.call('ZCARD', KEYS[11]) > 100
end

-- set_hand_over gives the member m, free at the server's clock (µs, a
-- decimal string: see clock_us) or let go by the lease from (see
-- set_grant), straight to the first live waiter that would take it, as
-- hand_over (waiters.lua) does for a lock: the waiter holds m until its
-- liveness deadline, and is told on its channel by "<token> <fence> <now
-- µs> <member>"; or, while that waiter has waited less than starve_us, it
-- is woken by "<token>" to try. The set's channel is channel. queued
-- tells whether anybody waits, when the caller knows (nil: looked at
-- here). It returns whether it handed m over: if not, m is as it was.
local function set_hand_over(m, clock, publish, channel, starve_us, queued, from)
  if queued == false or queued == nil and redis.call('EXISTS', KEYS[11]) == 0 then
    return false
  end
  local now = tonumber(clock)
  local now_ms = math.floor(now / 1000)
  prune_waiters(KEYS[11], KEYS[12], KEYS[13], string.sub(clock, 1, -4))
  local tok, order, entry, deadline = set_first_for(m)
  if not tok then
    return false
  end
  local want, meta = set_waiter(entry)
  if want ~= '' then
    channel = channel .. ':' .. want
  end
  if wake_to_barge(tok, order, now, publish, channel, starve_us) then
    return false
  end
  -- Until the waiter's liveness deadline; at least a ms (when more dead
  -- waiters lay ahead than one prune takes, tok may be one of them).
  local live = math.max(1, tonumber(deadline) - now_ms)
  drop_waiters(KEYS[11], KEYS[12], KEYS[13], tok)
  local fence = set_grant(m, tok, live, meta, now, clock, from)
  redis.call(publish, channel, table.concat({tok, fence, clock, m}, ' '))
  return true
end

-- set_lease_end reads the lease on member m at the server's clock (µs, a
-- decimal string: see clock_us): whether it is live, and the time of last
-- use m is to have once let go (server µs, a decimal string: the clock,
-- or the lease's expiry when that has passed). The expiry is compared
-- with the clock as decimal strings (exceeds): the scores of held members
-- are whole ms, or inf.
local function set_lease_end(m, clock)
  local e = redis.call('ZSCORE', KEYS[3], m)
  local live = e == 'inf' or (e and exceeds(e, string.sub(clock, 1, -4)))
  if e and not live then
    return false, e .. '000' -- it ended at its expiry
  end
  return live, clock
end

-- set_let_go ends the holding of member m by the lease tok at the
-- server's clock (µs, a decimal string: see clock_us) and passes m on: to
-- the first waiter that would take it (see set_hand_over: the grant
-- writes over the lease let go), or to the free members; a member removed
-- while held leaves the set instead, and its waiters are woken to learn
-- so. It returns whether the lease was live. queued is as for
-- set_hand_over.
local function set_let_go(m, tok, clock, publish, channel, starve_us, queued)
  local live, used = set_lease_end(m, clock)
  local removing = redis.call('SISMEMBER', KEYS[9], m) == 1
  if not removing and set_hand_over(m, clock, publish, channel, starve_us, queued, tok) then
    return live
  end
  if not set_vacate(m, used, tok, removing) then
    redis.call(publish, channel .. ':' .. m, 'all')
  end
  return live
end
