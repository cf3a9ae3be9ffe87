-- set_acquire.lua: take a free member of a mutex set: the one named, or
-- when none is named the least recently used one (never-used first), if
-- the caller may have it: no waiter ahead of it would take that member,
-- or that waiter has not yet waited starve_us (a newcomer may barge in,
-- as with Mutex). When none is named and waiters ahead keep the least
-- recently used members, one each, the next free one is taken (of the
-- first ten). Otherwise, when asked, queue the caller or renew its
-- place. Costs O(log n) in the set's size, plus O(k) for the k (at most
-- 100, and the caller's own) expired leases it frees on the way, and
-- with waiters O(w) for the w (at most 100) it looks at, for each of up
-- to ten free members.
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1]  token of the new lease
-- ARGV[2]  TTL in milliseconds; 0 = the lease never expires
-- ARGV[3]  the member wanted; '' for any
-- ARGV[4]  1 to join the queue when not granted (Acquire), 0 not to,
--          2 for a waiter's heartbeat: renew its place, take nothing (see
--          try_now)
-- ARGV[5]  waiter liveness timeout in ms
-- ARGV[6]  starve_us: how long a waiter may wait before newcomers must
--          queue behind it
-- ARGV[7]  metadata shown by Members; absent: none
-- Returns  "<fence> <member>" when taken;
--          {"<fence> <member>"} when this token holds one already (a try
--          sent again after a lost reply, or a member handed to it: the
--          lease's TTL then starts anew, but a hand-off's longer expiry
--          stays until the caller's first renewal);
--          {0, ms until it is worth trying again unasked (-1: only when
--           woken), holder: the named member's fence, or for any member
--           the set's highest fence, server time in µs (a hand-off to this
--           token dated before it was void by now)};
--          {-1} when the named member is not in the set or being removed;
--          a heartbeat never takes a member: it replies try_now instead.
local tok, ttl, want, join, meta = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[7] or ''
local clock = clock_us()
local now = tonumber(clock)
local ms = string.sub(clock, 1, -4) -- the server's ms, the clock's digits but the last three
local due = set_due(ms)
local mine = redis.call('HGET', KEYS[5], tok)
local queued = redis.call('EXISTS', KEYS[11]) == 1
-- The common case: no lease to reclaim, none of this token's, nobody
-- waiting, and a try (not a heartbeat) for any member: the least
-- recently used free one is taken, if there is one.
if #due == 0 and not mine and not queued and want == '' and join ~= '2' then
  local m = redis.call('ZRANGE', KEYS[2], '0', '0')[1]
  if m then
    return set_grant(m, tok, ttl, meta, now, clock) .. ' ' .. m
  end
end
-- @helpers
local beat = join == '2'
local now_ms = math.floor(now / 1000)
if #due > 0 then
  set_reclaim(due)
  mine = redis.call('HGET', KEYS[5], tok) -- its lease may have been one
end

if mine then
  local e = set_expiry(mine)
  if e and e > now_ms and beat then
    return try_now(now) -- handed to the waiter
  elseif e and e > now_ms then
    -- A try sent again after its reply was lost: the caller counts the
    -- lease's TTL from this try, so Redis must too; never less than it
    -- did (the first try may run after a Refresh made the lease longer).
    if ttl > 0 then
      redis.call('ZADD', KEYS[3], 'GT', int(math.ceil(now / 1000) + ttl), mine)
    else
      redis.call('ZADD', KEYS[3], '+inf', mine)
    end
    set_follow(mine)
    return {redis.call('HGET', KEYS[8], mine) .. ' ' .. mine}
  end
  -- Its lease ended unseen, beyond the leases set_reclaim freed in this
  -- call: end it now, before the token takes another member, or reclaiming
  -- this one later would drop the index entry of the new lease (and a try
  -- sent again could then take a third member). An entry naming a member
  -- the token does not hold is dropped alone.
  if e and set_owns(mine, tok) then
    set_vacate(mine, int(e * 1000), tok)
  else
    redis.call('HDEL', KEYS[5], tok)
  end
end

if queued then
  prune_waiters(KEYS[11], KEYS[12], KEYS[13], ms)
end
-- ahead is the waiter that should have member m before the caller, and
-- has waited long enough to keep it from a newcomer, but for those in
-- skip (see set_first_for), and its liveness deadline; nil when none. A
-- caller not queued gets '' when the first 100 waiters do not want m but
-- more wait behind them: one of those may, and takes m at its next
-- heartbeat, within a second (as does the caller once queued).
local function ahead(m, skip)
  if not queued then
    return nil
  end
  local w, order, _, deadline = set_first_for(m, tok, skip)
  if not w and order and not redis.call('ZSCORE', KEYS[11], tok) then
    return '', int(now_ms + 1000)
  end
  if not may_take(w, order, tok, now, tonumber(ARGV[6])) then
    return w, deadline
  end
  return nil
end
local function take(m)
  if beat then
    return try_now(now)
  end
  if queued then
    drop_waiters(KEYS[11], KEYS[12], KEYS[13], tok)
  end
  return set_grant(m, tok, ttl, meta, now, clock) .. ' ' .. m
end
local function refuse(wait, holder)
  if join ~= '0' and not join_queue(KEYS[11], KEYS[12], KEYS[13], tok, #want .. ':' .. want .. meta, now, tonumber(ARGV[5]), beat) then
    return try_now(now) -- a heartbeat of a waiter dropped from the queue
  end
  return {0, wait, holder, now}
end
local function wait_for(e)
  if e == math.huge then
    return -1
  end
  return math.max(e - now_ms, 0)
end
-- A waiter ahead takes the member, or is pruned at its liveness
-- deadline (a decimal string).
local function behind(deadline, holder)
  return refuse(math.max(0, tonumber(deadline) - now_ms), holder)
end

if want ~= '' then
  if not redis.call('ZSCORE', KEYS[1], want) or redis.call('SISMEMBER', KEYS[9], want) == 1 then
    return {-1}
  end
  local e = set_expiry(want)
  if e and e > now_ms then
    return refuse(wait_for(e), tonumber(redis.call('HGET', KEYS[8], want) or '0'))
  end
  local w, deadline = ahead(want)
  if w then
    return behind(deadline, 0)
  end
  if e then
    -- Expired, but beyond what set_reclaim freed in this call.
    set_vacate(want, int(e * 1000))
  end
  return take(want)
end

local m = redis.call('ZRANGE', KEYS[2], '0', '0')[1]
if m then
  local w, deadline = ahead(m)
  if not w then
    return take(m)
  end
  -- The least recently used member is kept for a waiter ahead (one just
  -- woken to take it, or a dead one not pruned yet): another free member
  -- may be for nobody ahead. Each waiter ahead keeps one member from the
  -- caller, the first it would take; the next nine free members are
  -- looked at.
  local kept = {[w] = true}
  for _, other in ipairs(redis.call('ZRANGE', KEYS[2], '1', '9')) do
    local v = ahead(other, kept)
    if not v then
      return take(other)
    end
    kept[v] = true
  end
  return behind(deadline, 0)
end
local wait = -1
local first = redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')
if first[2] and first[2] ~= 'inf' then
  wait = wait_for(tonumber(first[2]))
end
return refuse(wait, tonumber(redis.call('GET', KEYS[10]) or '0'))
