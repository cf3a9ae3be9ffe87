-- set.lua: the members and leases of a MutexSet.
--
-- MutexSet scripts share one KEYS layout, built in Client.MutexSet:
--   KEYS[1] pool: zset member -> the server µs from which it is free: 0
--           for a member never used, the time of its release, or for a
--           lease its expiry E (a whole ms) as E - 0.5 µs ('inf': the
--           lease never expires). A member is held while its score is not
--           whole and above the server's clock (see set_live): a lease
--           that ran out leaves a free member with no step to reclaim it,
--           and the lowest score is the least recently used free member.
--   KEYS[2] held: hash of two kinds of field (see set_field):
--           member -> record "<token> <flag> <fence> <since ms> <metadata>"
--             of its last lease (flag 'r': removed while held, else '-';
--             token '-' for a record with no lease, from a conversion).
--             It stays when the lease ends, for the member's last fence,
--             and is the lease's only while the score says held;
--           a zero byte and a token -> the member its lease holds, so a
--             try sent again after a lost reply, or a waiter that missed
--             its grant message, finds what it holds. A release drops it;
--             one left by a lease that ran out goes when the member is
--             taken again, or the token tries again.
--   KEYS[3] removing: set of members removed while held
--   KEYS[4] last: the highest fence issued in the set (see set_fence); it
--           outlives an emptied set while it can be ahead of the clock
--   KEYS[5] the waiters' queue: zset token -> arrival order (waiters.lua)
--   KEYS[6] their liveness: zset token -> deadline (server ms)
--   KEYS[7] what they wait for: hash token -> "<n>:<member><metadata>",
--           the member n bytes long ('' for any member)
-- On a single Redis only KEYS[1] is sent: the script names the others,
-- KEYS[1] and ':held' and so on, before it starts (loadNaming in
-- scripts.go). The set's waiters for any member listen on their client's
-- channel of the set (see client_channel), those waiting for a named
-- member on the member's: the set's channel, ':' and the member
-- (keys.MemberChannel).
--
-- Before this layout a set kept its members in eleven keys, ':held' a
-- zset among them: a script of this one meets WRONGTYPE on such a set at
-- its first read of KEYS[2], before it writes, and the client converts
-- the set (set_convert.lua) and runs the script again.

-- set_field returns the field of member m in KEYS[2]: m itself, or for a
-- name that starts with a zero byte another zero byte and m (a token's
-- field is a zero byte and the token, which is hex).
local function set_field(m)
  if string.byte(m) == 0 then
    return '\0' .. m
  end
  return m
end

-- set_live reports whether a pool score s (as read; nil or false: not
-- in the pool) is a lease live at now (server µs, a number): its expiry
-- E, a whole ms, is after now's ms.
local function set_live(s, now)
  return s == 'inf' or (s and string.byte(s, -2) == 46 and tonumber(s) > now)
end

-- set_score is the pool score of a lease taken or renewed at now_ms
-- (server ms, a number or a decimal string) for ttl ms (a decimal
-- string; '0' never ends): its expiry is one ms past now_ms and ttl, so
-- that Redis keeps it at least ttl.
local function set_score(now_ms, ttl)
  if ttl == '0' then
    return 'inf'
  end
  return int(tonumber(now_ms) + tonumber(ttl)) .. '999.5'
end

-- set_removing reports whether record r, of a lease of tok, is of a
-- member removed while held.
local function set_removing(r, tok)
  return string.byte(r, #tok + 2) == 114
end

-- set_fence_of returns the fence in record r, a decimal string.
local function set_fence_of(r)
  return string.match(r, '^%S+ %S (%d+) ')
end

-- set_wait_for returns the ms until a lease with pool score s ends (-1:
-- never), at now_ms.
local function set_wait_for(s, now_ms)
  if s == 'inf' then
    return -1
  end
  return math.max((tonumber(s) + 0.5) / 1000 - now_ms, 0)
end

-- set_fence issues the set's next fence at the server's clock (µs, a
-- decimal string: see clock_us) and returns it as a decimal string:
-- max(last + 1, clock), so fences rise strictly in the set, and so per
-- member. One command while the clock has passed the last fence.
local function set_fence(clock)
  local last = redis.call('SET', KEYS[4], clock, 'GET')
  if exceeds(clock, last) then
    return clock
  end
  local f = int(tonumber(last) + 1)
  redis.call('SET', KEYS[4], f)
  return f
end

-- set_grant gives member m, free or held by the lease of from (a
-- hand-over), to the lease tok (tf: its field, see set_field) for ttl ms
-- (a decimal string; '0' never ends) at the server's clock (µs, a decimal
-- string), and returns its fence (see set_score for its end).
-- (set_acquire.lua's common path writes it out.)
local function set_grant(m, tok, tf, ttl, meta, clock, from)
  local fence = set_fence(clock)
  local ms = string.sub(clock, 1, -4)
  redis.call('HSET', KEYS[2], set_field(m), tok .. ' - ' .. fence .. ' ' .. ms .. ' ' .. meta, tf, m)
  if from then
    redis.call('HDEL', KEYS[2], '\0' .. from)
  end
  redis.call('ZADD', KEYS[1], set_score(ms, ttl), m)
  return fence
end

-- set_forget drops member m from the set. Once the set has no member left
-- its keys go, but its highest fence, kept while it can still be ahead of
-- the clock: so an emptied set leaves nothing behind for long, and a
-- member added again gets fences above its old ones. The waiters' keys
-- stay, with their places (they wait for an Add), and expire with the
-- last waiter's liveness.
local function set_forget(m)
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], set_field(m))
  redis.call('SREM', KEYS[3], m)
  if redis.call('ZCARD', KEYS[1]) == 0 then
    local last = redis.call('GET', KEYS[4])
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
    if last then
      keep_fence(KEYS[4], tonumber(last), now_us())
    end
  end
end

-- set_claim readies member m, free with pool score s, to be taken: a
-- lease of it that ran out unreleased leaves its token's entry, dropped
-- here if it still names m; and if that lease was of a member removed
-- while held, m leaves the set. It returns whether m is still there.
local function set_claim(m, s)
  if string.byte(s, -2) ~= 46 then
    return true
  end
  local r = redis.call('HGET', KEYS[2], set_field(m))
  local old = r and string.match(r, '^(%S+) ')
  if old and redis.call('HGET', KEYS[2], '\0' .. old) == m then
    redis.call('HDEL', KEYS[2], '\0' .. old)
  end
  if old and string.byte(r, #old + 2) == 114 then
    set_forget(m)
    return false
  end
  return true
end

-- set_end_with_leases gives the set's keys the end of the last lease
-- held in it: a ms after it, and the set's highest fence a minute after
-- that (as keep_fence keeps it); none while a lease never expires. For a
-- set whose every member left is being removed (see set_fade).
local function set_end_with_leases()
  local top = redis.call('ZRANGE', KEYS[1], '-1', '-1', 'WITHSCORES')[2]
  if not top then
    return
  end
  if top == 'inf' then
    for i = 1, 4 do
      redis.call('PERSIST', KEYS[i])
    end
    return
  end
  local at = math.max(math.ceil(tonumber(top) / 1000), time_ms()) + 1
  for i = 1, 3 do
    redis.call('PEXPIREAT', KEYS[i], int(at))
  end
  local last = redis.call('GET', KEYS[4])
  if last then
    redis.call('PEXPIREAT', KEYS[4], int(math.max(at, math.ceil(tonumber(last) / 1000)) + 60000))
  end
end

-- set_fade gives the set's keys an end once every member left in it is
-- being removed (each held, and leaving when its lease ends): they end
-- with the last of those leases (see set_end_with_leases), so a set whose
-- last holders died leaves nothing behind for good. Call it after a
-- removal, and when a member being removed leaves; set_follow keeps the
-- end after a lease is extended, and set_keep undoes it.
local function set_fade()
  local n = redis.call('ZCARD', KEYS[1])
  if n > 0 and n == #redis.call('SMEMBERS', KEYS[3]) then
    set_end_with_leases()
  end
end

-- set_follow moves the end set_fade gave the set's keys (if it did: then
-- the pool expires) after the lease on a member being removed was
-- extended.
local function set_follow()
  if redis.call('PTTL', KEYS[1]) >= 0 then
    set_end_with_leases()
  end
end

-- set_keep makes the keys of a set that set_fade gave an end lasting
-- again: a member was added, or its removal cancelled.
local function set_keep()
  if redis.call('PERSIST', KEYS[1]) == 1 then
    for i = 2, 4 do
      redis.call('PERSIST', KEYS[i])
    end
  end
end

-- set_waiter splits a waiter's entry in KEYS[7] into the member it waits
-- for ('' for any) and its metadata; nil for an entry dlock did not
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
  local q = redis.call('ZRANGE', KEYS[5], '0', '99', 'WITHSCORES')
  if #q == 0 then
    return nil
  end
  local toks = {}
  for i = 1, #q, 2 do
    toks[#toks + 1] = q[i]
  end
  local entries = redis.call('HMGET', KEYS[7], unpack(toks))
  for i, tok in ipairs(toks) do
    if tok == stop then
      return nil
    end
    local want = set_waiter(entries[i])
    if skip and skip[tok] then
      -- passed over
    elseif want == nil then
      drop_waiters(KEYS[5], KEYS[6], KEYS[7], tok)
    elseif want == '' or want == m then
      local deadline = redis.call('ZSCORE', KEYS[6], tok)
      if deadline then
        return tok, tonumber(q[2 * i]), entries[i], deadline
      end
      drop_waiters(KEYS[5], KEYS[6], KEYS[7], tok)
    end
  end
  return nil, #q == 200 and redis.call('ZCARD', KEYS[5]) > 100
end

-- set_hand_over gives the member m, free at the server's clock (µs, a
-- decimal string: see clock_us) or let go by the lease from (see
-- set_grant), straight to the first live waiter that would take it, as
-- hand_over (waiters.lua) does for a lock: the waiter holds m until its
-- liveness deadline, and is told on its channel by "<token> <fence> <now
-- µs> <member>" (its client's beside the set's channel, channel, for a
-- waiter for any member; the member's for a waiter for m: see
-- client_channel); or, while that waiter has waited less than
-- starve_us, it is woken by "<token>" to try. queued
-- tells whether anybody waits, when the caller knows (nil: looked at
-- here). It returns whether it handed m over: if not, m is as it was.
local function set_hand_over(m, clock, publish, channel, starve_us, queued, from)
  if queued == false or queued == nil and redis.call('EXISTS', KEYS[5]) == 0 then
    return false
  end
  local now = tonumber(clock)
  local now_ms = math.floor(now / 1000)
  prune_waiters(KEYS[5], KEYS[6], KEYS[7], string.sub(clock, 1, -4))
  local tok, order, entry, deadline = set_first_for(m)
  if not tok then
    return false
  end
  local want, meta = set_waiter(entry)
  if want ~= '' then
    channel = channel .. ':' .. want
  else
    channel = client_channel(channel, tok)
  end
  if wake_to_barge(tok, order, now, publish, channel, starve_us) then
    return false
  end
  -- Until the waiter's liveness deadline; at least a ms (when more dead
  -- waiters lay ahead than one prune takes, tok may be one of them).
  local live = math.max(1, tonumber(deadline) - now_ms)
  drop_waiters(KEYS[5], KEYS[6], KEYS[7], tok)
  local fence = set_grant(m, tok, '\0' .. tok, int(live), meta, clock, from)
  redis.call(publish, channel, table.concat({tok, fence, clock, m}, ' '))
  return true
end

-- set_let_go ends the holding of member m by the lease tok, whose record
-- is r, at the server's clock (µs, a decimal string: see clock_us) and
-- passes m on: to the first waiter that would take it (see
-- set_hand_over: the grant writes over the lease let go), or to the free
-- members, as the most recently used unless the lease ran out before (it
-- keeps its end as its last use); a member removed while held leaves the
-- set instead, and its waiters are woken to learn so. It returns whether
-- the lease was live. queued is as for set_hand_over.
local function set_let_go(m, tok, r, clock, publish, channel, starve_us, queued)
  local live = set_live(redis.call('ZSCORE', KEYS[1], m), tonumber(clock))
  if set_removing(r, tok) then
    redis.call('HDEL', KEYS[2], '\0' .. tok)
    set_forget(m)
    set_fade() -- a lease that never expired may have kept the keys
    redis.call(publish, channel .. ':' .. m, 'all')
    return live
  end
  if set_hand_over(m, clock, publish, channel, starve_us, queued, tok) then
    return live
  end
  redis.call('ZADD', KEYS[1], 'XX', 'LT', clock, m)
  redis.call('HDEL', KEYS[2], '\0' .. tok)
  return live
end

-- set_convert turns a set kept in the layout before this one (its KEYS[2]
-- a zset of lease expiries; beside KEYS[1] to KEYS[7], its other keys
-- are KEYS[8] free, KEYS[9] owner, KEYS[10] leases, KEYS[11] meta,
-- KEYS[12] since and KEYS[13] fences) into this one, at once: leases
-- are carried over with their expiries, so no member comes free while
-- its holder may still work (an older client then finds its lease gone
-- at its next renewal), free members keep their order of last use, and
-- every fence stays. O(n) in the set's size. A set whose KEYS[2] is not
-- a zset (none held when an older client left it, so this layout's
-- scripts met no WRONGTYPE and used it as it was; or keys an older
-- client's Add left beside a set in this layout) keeps its pool and
-- records: only a member this layout never used takes its older last use
-- and fence. Nothing to do without keys of the older layout. It returns
-- whether it converted anything.
local function set_convert()
  local expiry = {}
  local older = false
  local probe = redis.pcall('HGET', KEYS[2], '\0')
  if type(probe) == 'table' then
    if not string.find(probe.err, 'WRONGTYPE', 1, true) then
      error(probe.err)
    end
    older = true
    local held = redis.call('ZRANGE', KEYS[2], '0', '-1', 'WITHSCORES')
    for i = 1, #held, 2 do
      expiry[held[i]] = held[i + 1]
    end
    redis.call('DEL', KEYS[2])
  elseif redis.call('EXISTS', unpack(KEYS, 8, 13)) == 0 then
    return false
  end
  local ttl = redis.call('PTTL', KEYS[1])
  local members = redis.call('ZRANGE', KEYS[1], '0', '-1')
  for _, m in ipairs(members) do
    local fence = redis.call('HGET', KEYS[13], m) or '0'
    local e = expiry[m]
    local tok = e and redis.call('HGET', KEYS[9], m)
    if tok then
      local flag = redis.call('SISMEMBER', KEYS[3], m) == 1 and 'r' or '-'
      local since = redis.call('HGET', KEYS[12], m) or '0'
      local meta = redis.call('HGET', KEYS[11], m) or ''
      redis.call('HSET', KEYS[2], set_field(m), table.concat({tok, flag, fence, since, meta}, ' '), '\0' .. tok, m)
      if e ~= 'inf' then
        e = int(tonumber(e) - 1) .. '999.5'
      end
      redis.call('ZADD', KEYS[1], e, m)
    elseif not older then
      -- No ':held' zset: the pool's scores and records are this layout's
      -- (an older set left at rest, which this layout's scripts use as
      -- it is, or keys an older client left beside a set in this layout).
      -- A live lease must stay, and a member being removed with it; only
      -- a member this layout never used takes its older last use and
      -- fence.
      if redis.call('ZSCORE', KEYS[1], m) == '0' and not redis.call('HGET', KEYS[2], set_field(m)) then
        redis.call('ZADD', KEYS[1], redis.call('ZSCORE', KEYS[8], m) or '0', m)
        if fence ~= '0' then
          redis.call('HSET', KEYS[2], set_field(m), '- - ' .. fence .. ' 0 ')
        end
      end
    elseif redis.call('SISMEMBER', KEYS[3], m) == 1 then
      set_forget(m) -- removed while held, and its lease ran out
    else
      redis.call('ZADD', KEYS[1], redis.call('ZSCORE', KEYS[8], m) or '0', m)
      if fence ~= '0' then
        redis.call('HSET', KEYS[2], set_field(m), '- - ' .. fence .. ' 0 ')
      end
    end
  end
  redis.call('DEL', unpack(KEYS, 8, 13))
  if ttl >= 0 then
    set_end_with_leases()
  end
  return true
end
