-- set_acquire.lua: take a free member of a mutex set: the one named, or
-- when none is named the least recently used one (never-used first), if
-- the caller may have it: no waiter ahead of it would take that member,
-- or that waiter has not yet waited starve_us (a newcomer may barge in,
-- as with Mutex). When none is named and waiters ahead keep the least
-- recently used members, one each, the next free one is taken (of the
-- first ten in the pool). Otherwise, when asked, queue the caller or
-- renew its place. Costs O(log n) in the set's size, and with waiters
-- O(w) for the w (at most 100) it looks at, for each of up to ten free
-- members; a try for a named member also O(r) in the r members being
-- removed.
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys; on a
--          single Redis the main key alone, see loadLazyNaming)
-- ARGV[1]  token of the new lease
-- ARGV[2]  TTL in milliseconds; 0 = the lease never expires
-- ARGV[3]  "<join> <liveness> <starve_us>", read only off the common
--          path: join 1 to join the queue when not granted (Acquire), 0
--          not to, 2 for a waiter's heartbeat (renew its place, take
--          nothing: see try_now); liveness, the waiter liveness timeout
--          in ms; starve_us, how long a waiter may wait before newcomers
--          must queue behind it
-- ARGV[4]  metadata shown by Members; absent (or ''): none
-- ARGV[5]  the member wanted; absent: any
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
local tok, ttl, meta = ARGV[1], ARGV[2], ARGV[4] or ''
local pool = KEYS[1]
local held = KEYS[2] or pool .. ':held'
local t = redis.call('TIME')
local clock = t[1] .. string.sub('00000' .. t[2], -6) -- clock_us, written out
local tf = '\0' .. tok
-- First read of KEYS[2], before anything is written (see lib/set.lua).
local mine = redis.call('HGET', held, tf)
local queued = redis.call('EXISTS', KEYS[5] or pool .. ':queue') == 1
-- The common case: no lease of this token's, nobody waiting, and a try
-- (not a heartbeat) for any member: the least recently used one is
-- taken if it is free and was released (a whole score). What set_grant
-- does is written out here: each helper defined costs every run a
-- closure, about a command's worth of Redis time.
if not mine and not queued and not ARGV[5] and string.byte(ARGV[3]) ~= 50 then
  local first = redis.call('ZRANGE', pool, '0', '0', 'WITHSCORES')
  local m, s = first[1], first[2]
  if s and s ~= 'inf' and string.byte(s, -2) ~= 46 then
    -- A member never used here may be one of a set an older dlock left at
    -- rest: with none held it has no ':held' zset to meet, and its members
    -- all score 0 here. It is converted first (see lib/set.lua), as
    -- WRONGTYPE has the client do; before anything is written.
    if s == '0' and redis.call('EXISTS', pool .. ':free') == 1 then
      return redis.error_reply('WRONGTYPE a set in the older layout, at rest')
    end
    local fence_key = KEYS[4] or pool .. ':last'
    local fence = clock
    local last = redis.call('SET', fence_key, clock, 'GET')
    if last and not (#clock > #last or (#clock == #last and clock > last)) then
      fence = string.format('%d', tonumber(last) + 1)
      redis.call('SET', fence_key, fence)
    end
    local ms = string.sub(clock, 1, -4)
    local f = m
    if string.byte(m) == 0 then
      f = '\0' .. m
    end
    redis.call('HSET', held, f, tok .. ' - ' .. fence .. ' ' .. ms .. ' ' .. meta, tf, m)
    local score = 'inf'
    if ttl ~= '0' then
      score = string.format('%d', tonumber(ms) + tonumber(ttl)) .. '999.5'
    end
    redis.call('ZADD', pool, score, m)
    return fence .. ' ' .. m
  end
end
-- @helpers
name_keys()
local want, join, live_ms, starve_us = ARGV[5] or '', string.match(ARGV[3], '^(%d) (%d+) (%d+)$')
local now = tonumber(clock)
local now_ms = math.floor(now / 1000)
local beat = join == '2'

if mine then
  local s = redis.call('ZSCORE', KEYS[1], mine)
  local r = redis.call('HGET', KEYS[2], set_field(mine))
  if held_by(r, tok) and set_live(s, now) then
    if beat then
      return try_now(now) -- handed to the waiter
    end
    -- A try sent again after its reply was lost: the caller counts the
    -- lease's TTL from this try, so Redis must too; never less than it
    -- did (the first try may run after a Refresh made the lease longer).
    redis.call('ZADD', KEYS[1], 'XX', 'GT', set_score(now_ms, ttl), mine)
    if set_removing(r, tok) then
      set_follow()
    end
    return {set_fence_of(r) .. ' ' .. mine}
  end
  -- Its lease ended unseen: drop the entry before the token takes another
  -- member, and a member removed while that lease held it leaves the set.
  redis.call('HDEL', KEYS[2], tf)
  if held_by(r, tok) and set_removing(r, tok) then
    set_forget(mine)
    set_fade()
  end
end

if queued then
  prune_waiters(KEYS[5], KEYS[6], KEYS[7], string.sub(clock, 1, -4))
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
  if not w and order and not redis.call('ZSCORE', KEYS[5], tok) then
    return '', int(now_ms + 1000)
  end
  if not may_take(w, order, tok, now, tonumber(starve_us)) then
    return w, deadline
  end
  return nil
end
local function take(m)
  if beat then
    return try_now(now)
  end
  if queued then
    drop_waiters(KEYS[5], KEYS[6], KEYS[7], tok)
  end
  return set_grant(m, tok, tf, ttl, meta, clock) .. ' ' .. m
end
local function refuse(wait, holder)
  if join ~= '0' and not join_queue(KEYS[5], KEYS[6], KEYS[7], tok, #want .. ':' .. want .. meta, now, tonumber(live_ms), beat) then
    return try_now(now) -- a heartbeat of a waiter dropped from the queue
  end
  return {0, wait, holder, now}
end
-- A waiter ahead takes the member, or is pruned at its liveness
-- deadline (a decimal string).
local function behind(deadline, holder)
  return refuse(math.max(0, tonumber(deadline) - now_ms), holder)
end

if want ~= '' then
  -- Members removed while held whose leases ran out leave the set when
  -- met: an acquire for any member meets them in the pool's order, but
  -- one for a named member may never, so it looks for them while any
  -- removal is pending (O(r) in the r members being removed; one
  -- SMEMBERS, empty, when none is).
  local gone = false
  for _, r in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    local rs = redis.call('ZSCORE', KEYS[1], r)
    if rs and not set_live(rs, now) and not set_claim(r, rs) then
      gone = true
    end
  end
  if gone then
    set_fade()
  end
  local s = redis.call('ZSCORE', KEYS[1], want)
  if not s then
    return {-1}
  end
  if set_live(s, now) then
    local r = redis.call('HGET', KEYS[2], set_field(want))
    if redis.call('SISMEMBER', KEYS[3], want) == 1 then
      return {-1}
    end
    return refuse(set_wait_for(s, now_ms), tonumber(set_fence_of(r or '- - 0 ') or '0'))
  end
  if not set_claim(want, s) then
    return {-1} -- removed while held, and that lease ran out
  end
  local w, deadline = ahead(want)
  if w then
    return behind(deadline, 0)
  end
  return take(want)
end

-- The ten least recently used members, free ones first: each waiter
-- ahead keeps one from the caller, the first it would take (one just
-- woken to take it, or a dead one not pruned yet); another free member
-- may be for nobody ahead.
local pool = redis.call('ZRANGE', KEYS[1], '0', '9', 'WITHSCORES')
local kept, first_kept = {}, nil
for i = 1, #pool, 2 do
  local m, s = pool[i], pool[i + 1]
  if set_live(s, now) then
    if first_kept then
      return behind(first_kept, 0)
    end
    return refuse(set_wait_for(s, now_ms), tonumber(redis.call('GET', KEYS[4]) or '0'))
  end
  if set_claim(m, s) then
    local w, deadline = ahead(m, kept)
    if not w then
      return take(m)
    end
    kept[w] = true
    first_kept = first_kept or deadline
  end
end
if first_kept then
  return behind(first_kept, 0)
end
if #pool == 20 then
  -- Ten members kept for waiters ahead, or removed while held: the
  -- next heartbeat looks again.
  return refuse(1000, tonumber(redis.call('GET', KEYS[4]) or '0'))
end
return refuse(-1, tonumber(redis.call('GET', KEYS[4]) or '0'))
