-- readers.lua: the read shares of an RWMutex, each a lease of its own.

-- expire_by_last gives each key in ... the expiry of the highest score of
-- the zset by, a deadline in server ms ('inf': never), at now_ms. The keys
-- of a set of leases (an RWMutex's readers) then live as long as its
-- longest lease and no longer, however the leases come and go. mine and
-- ttl (strings, or nil) are a deadline the caller has asked for and its
-- keys' TTL in ms (see deadline_of; 'inf' and false: none): when the
-- highest deadline is that one,
-- as it is for the only lease, the keys expire in ttl, with no number
-- read or made.
local function expire_by_last(by, now_ms, mine, ttl, ...)
  local last = redis.call('ZRANGE', by, '-1', '-1', 'WITHSCORES')[2]
  if not last then
    return
  end
  local left = false -- a lease that never ends: no expiry
  if last ~= 'inf' then
    left = last == mine and ttl or int(math.max(1, tonumber(last) - now_ms))
  end
  for _, k in ipairs({...}) do
    if left then
      redis.call('PEXPIRE', k, left)
    else
      redis.call('PERSIST', k)
    end
  end
end
