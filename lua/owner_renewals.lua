-- owner_renewals.lua: owner_refresh.lua (without an announcement) for
-- many leases in one run, packed lean (see packRenewals in merge.go): no
-- counts per call, and per group of leases that share a TTL, one expiry
-- time, computed once, and on a single Redis one MGET for their keys. A
-- renewal costs Redis its PEXPIREAT (which, unlike PEXPIRE, Redis keeps
-- as sent) and its share of the rest. The loop calls no Lua function of
-- its own and makes no string: each costs Redis about a tenth of what a
-- command does.
-- KEYS[1]  the first lease's owner key (it routes the run on a Cluster)
-- ARGV[1]  '1': read the owner keys with one MGET per group (a single
--          Redis); '0': with a GET each (a Cluster, where a run's keys
--          lie in many slots of its node, which MGET may not span)
-- ARGV     then groups of leases that share a TTL, each: the new TTL in
--          milliseconds, the number n of its leases, their n owner keys,
--          their n tokens (in the same order)
-- Returns  the leases' replies in order, each owner_refresh.lua's (1
--          when extended, 0 when the token no longer held it), or
--          {'dlock:error', message} when reading its key failed, as
--          each_call (lib/batch.lua) gives a failed call
local call, find, byte = redis.call, string.find, string.byte
local out, o = {}, 0
local mget = ARGV[1] == '1'
local now = time_ms()
local a = 2
while a <= #ARGV do
  -- Expiring at now + TTL, now read before any lease's key, ends no lease
  -- sooner than its holder counts: from before it sent the renewal.
  local at, n = int(now + tonumber(ARGV[a])), tonumber(ARGV[a + 1])
  local k, t = a + 2, a + 2 + n -- the group's first key, first token
  local vals = mget and call('MGET', unpack(ARGV, k, t - 1))
  for i = 0, n - 1 do
    local key, tok = ARGV[k + i], ARGV[t + i]
    local v = mget and vals[i + 1]
    if not v then
      -- GET tells a missing key from one that is not a string (MGET
      -- reads both as nil; a renewal alone fails on the latter), and on
      -- a Cluster finds a key on another node (the call then goes alone).
      v = redis.pcall('GET', key)
    end
    o = o + 1
    if type(v) == 'table' then
      out[o] = {'dlock:error', v.err}
    elseif v and find(v, tok, 1, true) == 1 and byte(v, #tok + 1) == 32 then
      call('PEXPIREAT', key, at) -- v is "<tok> ...": tok's lease
      out[o] = 1
    else
      out[o] = 0
    end
  end
  a = t + n
end
return out
