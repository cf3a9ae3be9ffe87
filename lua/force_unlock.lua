-- force_unlock.lua: remove a lock's holders for an operator, and wake
-- every waiter. Fence keys are kept, so fences keep rising. The holder is
-- checked first: if the lock changed hands since the operator looked,
-- nothing is removed.
-- KEYS[1]  the lock's owner key; KEYS[2…] other keys that record holders
-- ARGV[1]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[2]  the fence the owner key must hold; 'none': the owner key must
--          hold no writer (an RWMutex seen held by readers alone, one of
--          them perhaps in the owner key: a writer that took it since is
--          not removed); '' to remove it anyway
-- ARGV[3…] the lock's release channels; each gets 'all'
-- Returns  the number of keys removed; -1 when the holder changed
if ARGV[2] == 'none' then
  if writer_holds(KEYS[1]) then
    return -1
  end
elseif ARGV[2] ~= '' then
  local h = owner_of(redis.call('GET', KEYS[1]))
  if not h or int(h.fence) ~= ARGV[2] then
    return -1
  end
end
local n = redis.call('DEL', unpack(KEYS))
for i = 3, #ARGV do
  redis.call(ARGV[1], ARGV[i], 'all')
end
return n
