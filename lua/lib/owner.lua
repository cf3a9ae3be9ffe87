-- owner.lua: the owner hash of an exclusive lock (Mutex, FairMutex, an
-- RWMutex's writer, a Redlock node's share): {tok, fence, meta, since},
-- expiring with the lease.

-- owns reports whether the lease tok holds the owner hash.
local function owns(owner, tok)
  return redis.call('HGET', owner, 'tok') == tok
end

-- take_owner makes tok the holder recorded in an owner hash, expiring
-- after ttl_ms (0: never). It issues and returns the lease's fence.
local function take_owner(owner, fence_key, tok, meta, ttl_ms, now)
  local fence = issue_fence(fence_key, now)
  redis.call('HSET', owner, 'tok', tok, 'fence', int(fence), 'meta', meta,
    'since', int(math.floor(now / 1000)))
  if ttl_ms > 0 then
    redis.call('PEXPIRE', owner, ttl_ms)
  end
  return fence
end

-- owner_status reads an owner hash for a status reply: {1, pttl, fence,
-- meta, since} while held, else {0, -2, the last fence, '', 0}.
local function owner_status(owner, fence_key)
  local h = redis.call('HMGET', owner, 'fence', 'meta', 'since')
  if h[1] then
    return {1, redis.call('PTTL', owner), tonumber(h[1]), h[2] or '', tonumber(h[3] or '0')}
  end
  return {0, -2, tonumber(redis.call('GET', fence_key) or '0'), '', 0}
end

-- retried returns the fence of tok's lease when holder, the owner hash's
-- {tok, fence}, shows tok holding it already: a try sent again after its
-- reply was lost. The caller counts the lease's TTL from this try, so it
-- sets ttl_ms (0: no expiry) anew. It returns nil for any other holder.
local function retried(owner, holder, tok, ttl_ms)
  if holder[1] ~= tok then
    return nil
  end
  if ttl_ms > 0 then
    redis.call('PEXPIRE', owner, ttl_ms)
  end
  return tonumber(holder[2])
end
