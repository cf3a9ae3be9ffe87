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
