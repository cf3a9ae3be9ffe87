-- writers.lua: the waiting writers of an RWMutex. They queue as a Mutex's
-- waiters do (see waiters.lua), in three keys of their own, and those
-- that ask readers to give way (PreferWriters) also hold an intention: a
-- zset token -> liveness deadline (server ms) that PreferWriters readers
-- look at.

-- next_writer moves an RWMutex on once its write side is free and no
-- reader holds it. The first live writer is handed the lock (see
-- hand_over), or woken to try for it while it has waited less than
-- starve_us. When wake_readers is set (a writer let go, so readers may
-- wait), a first writer without an intention (PreferReaders) is only
-- woken, to try beside the readers, and the readers are woken on rchan
-- by "all" unless a writer was handed the lock.
local function next_writer(owner, fence_key, intent, queue, alive, wmeta, publish, rchan, wchan, starve_us, wake_readers)
  local head, order = first_waiter(queue)
  if wake_readers and head and not redis.call('ZSCORE', intent, head) then
    starve_us = math.huge
  end
  local to = hand_over(owner, fence_key, queue, alive, wmeta, publish, wchan, starve_us, head, order)
  if to then
    redis.call('ZREM', intent, to)
  elseif wake_readers then
    wake_all_readers(publish, rchan)
  end
end

-- wake_all_readers tells every reader waiting on rchan (sent with
-- publish) that no writer holds the lock or comes next: "all".
local function wake_all_readers(publish, rchan)
  redis.call(publish, rchan, 'all')
end
