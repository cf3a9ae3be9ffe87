-- set_acquire.lua: take a free member of a mutex set: the one named, or
-- when none is named the least recently used one (never-used first).
-- Costs O(log n) in the set's size, plus O(k) for the k (at most 100)
-- expired leases it frees on the way.
-- KEYS     the MutexSet layout described in lib/set.lua (10 keys)
-- ARGV[1]  token of the new lease
-- ARGV[2]  TTL in milliseconds; 0 = the lease never expires
-- ARGV[3]  metadata shown by Members
-- ARGV[4]  the member wanted; '' for any
-- Returns  {1, fence, member} when taken (also when this token already
--          holds one: a try may be sent again after a lost reply; the
--          lease's TTL then starts anew);
--          {0, ms until a lease that blocks us runs out (-1: none will;
--           only a release or an Add helps), holder: the named member's
--           fence, or for any member the set's last fence};
--          {-1} when the named member is not in the set or being removed.
local tok, ttl, meta, want = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local now = now_us()
local now_ms = math.floor(now / 1000)
set_reclaim(now_ms)

local mine = redis.call('HGET', KEYS[5], tok)
if mine then
  local e = set_expiry(mine)
  if e and e > now_ms then
    -- A try sent again after its reply was lost: the caller counts the
    -- lease's TTL from this try, so Redis must too.
    if ttl > 0 then
      redis.call('ZADD', KEYS[3], int(math.ceil(now / 1000) + ttl), mine)
    end
    return {1, tonumber(redis.call('HGET', KEYS[8], mine)), mine}
  end
end

local function wait_for(e)
  if e == math.huge then
    return -1
  end
  return math.max(e - now_ms, 0)
end

if want ~= '' then
  if not redis.call('ZSCORE', KEYS[1], want) or redis.call('SISMEMBER', KEYS[9], want) == 1 then
    return {-1}
  end
  local e = set_expiry(want)
  if e and e > now_ms then
    return {0, wait_for(e), tonumber(redis.call('HGET', KEYS[8], want) or '0')}
  elseif e then
    -- Expired, but beyond what set_reclaim freed in this call.
    set_vacate(want, e * 1000)
  end
  return {1, set_grant(want, tok, ttl, meta, now), want}
end

local m = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if m then
  return {1, set_grant(m, tok, ttl, meta, now), m}
end
local wait = -1
local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if first[2] and first[2] ~= 'inf' then
  wait = wait_for(tonumber(first[2]))
end
return {0, wait, tonumber(redis.call('GET', KEYS[10]) or '0')}
