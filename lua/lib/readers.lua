-- readers.lua: the read shares of an RWMutex, each a lease of its own.

-- expire_by_last gives each key in ... the expiry of the highest score of
-- the zset by, a deadline in server ms ('inf': never). The keys of a set of
-- leases (an RWMutex's readers) then live as long as its longest lease and
-- no longer, however the leases come and go.
local function expire_by_last(by, now_ms, ...)
  local last = redis.call('ZRANGE', by, '-1', '-1', 'WITHSCORES')[2]
  if not last then
    return
  end
  local left = last ~= 'inf' and int(math.max(1, tonumber(last) - now_ms))
  for _, k in ipairs({...}) do
    if left then
      redis.call('PEXPIRE', k, left)
    else
      redis.call('PERSIST', k)
    end
  end
end
