-- mutex_release.lua: release the mutex if the token still holds it, and
-- wake one waiter per subscribed client.
-- KEYS[1]  the mutex hash
-- ARGV[1]  token of the lease
-- ARGV[2]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[3]  the mutex's release channel
-- Returns  1 when released; 0 when the token did not hold it (nothing changes).
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[2], ARGV[3], 'one')
return 1
