-- mutex_status.lua: describe the mutex without changing it.
-- KEYS[1]  the mutex hash
-- KEYS[2]  the mutex's last fence
-- ARGV     none
-- Returns  {held (0|1), remaining TTL in ms (-1: never expires, -2: free),
--           fence (the holder's, else the last one remembered, else 0),
--           holder metadata, acquired at (ms since 1970 by the server clock)}
local h = redis.call('HMGET', KEYS[1], 'fence', 'meta', 'since')
if h[1] then
  return {1, redis.call('PTTL', KEYS[1]), tonumber(h[1]), h[2] or '', tonumber(h[3] or '0')}
end
return {0, -2, tonumber(redis.call('GET', KEYS[2]) or '0'), '', 0}
