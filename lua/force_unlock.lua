-- force_unlock.lua: remove a lock's holders for an operator, and wake
-- every waiter. Fence keys are kept, so fences keep rising. The holder is
-- checked first: if the lock changed hands since the operator looked,
-- nothing is removed.
-- KEYS[1…n] the lock's owner key, then other keys that record holders:
--           removed
-- KEYS[n+1…] the lock's queues whose waiters hear their wake-ups on
--           their clients' channels (see client_channel): read
-- ARGV[1]  publish command: PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[2]  the fence the owner key must hold; 'none': the owner key must
--          hold no writer (an RWMutex seen held by readers alone, one of
--          them perhaps in the owner key: a writer that took it since is
--          not removed); '' to remove it anyway
-- ARGV[3]  n, the number of keys removed
-- ARGV[4…] the lock's release channels; each gets 'all', and so does,
--          for the first one per queue in the order of the queues, the
--          channel of each client that has a waiter in that queue
-- Returns  the number of keys removed; -1 when the holder changed
local n = tonumber(ARGV[3])
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
local removed = redis.call('DEL', unpack(KEYS, 1, n))
for i = 4, #ARGV do
  local channel = ARGV[i]
  redis.call(ARGV[1], channel, 'all')
  local queue = KEYS[n + i - 3]
  if queue then
    local told = {}
    for _, tok in ipairs(redis.call('ZRANGE', queue, '0', '-1')) do
      local to = client_channel(channel, tok)
      if not told[to] then
        told[to] = true
        redis.call(ARGV[1], to, 'all')
      end
    end
  end
end
return removed
