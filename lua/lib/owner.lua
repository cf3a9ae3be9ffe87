-- owner.lua: the owner key of an exclusive lock (Mutex, FairMutex, an
-- RWMutex's writer, a Redlock node's share): one string that expires with
-- the lease, "<tok> <fence> <since ms> <id> <meta>" (id: a Redlock lease's
-- public id, else empty; meta last, so it may hold anything). One string,
-- not a hash, so that taking a free lock is one SET NX PX and reading its
-- holder one GET.

-- owner_of parses an owner key's value (nil: free) into
-- {tok, fence, since, id, meta}, or returns nil. A value it cannot read
-- (not dlock's) is a holder with token '', fence 0 and since 0.
local function owner_of(v)
  if not v then
    return nil
  end
  local tok, fence, since, id, meta = string.match(v, '^(%S+) (%d+) (%d+) (%S*) (.*)$')
  if not tok then
    return {tok = '', fence = 0, since = 0, id = '', meta = ''}
  end
  return {tok = tok, fence = tonumber(fence), since = tonumber(since), id = id, meta = meta}
end

-- held_by reports whether v, an owner key's value as read (false: free),
-- is the lease tok's: "<tok> ...". A plain find and a byte make no
-- string (each string made costs Redis about a tenth of a command).
local function held_by(v, tok)
  return v ~= false and string.find(v, tok, 1, true) == 1 and string.byte(v, #tok + 1) == 32
end

-- owns reports whether the lease tok holds the owner key.
local function owns(owner, tok)
  return held_by(redis.call('GET', owner), tok)
end

-- read_owners reads the n owner keys ARGV[k], ..., ARGV[k + n - 1] of a
-- batched run and returns what a GET of each gives: its value, false (no
-- key), or an error table (a key of another type, or on another node).
-- One MGET reads them all on a single Redis; a key it reads as nil (none,
-- or not a string) is read again with GET, which tells the two apart; on
-- a Cluster, where Redis refuses an MGET over many slots, each is read
-- with a GET.
local function read_owners(k, n)
  local vals = redis.pcall('MGET', unpack(ARGV, k, k + n - 1))
  if vals.err then
    vals = {}
  end
  for i = 1, n do
    if not vals[i] then
      vals[i] = redis.pcall('GET', ARGV[k + i - 1])
    end
  end
  return vals
end

-- refresh_owner extends the lease tok holds on the owner key to ttl ms (a
-- decimal string, as the caller sent it) and returns 1, or returns 0 when
-- tok does not hold it (nothing changes). With publish and channel (an
-- Election's) a lease brought nearer its end is announced on channel by
-- "leader": those who follow the holder wake when it would run out, and
-- must learn the new time.
local function refresh_owner(owner, tok, ttl, publish, channel)
  if not owns(owner, tok) then
    return 0
  end
  local sooner = false
  if channel then
    local left = redis.call('PTTL', owner) -- -1: it never expired
    sooner = left == -1 or left > tonumber(ttl)
  end
  redis.call('PEXPIRE', owner, ttl)
  if sooner then
    redis.pcall(publish, channel, 'leader') -- extended: never fail on it
  end
  return 1
end

-- holder_of reads, from an owner key's value (false: free), its holder's
-- token, fence and id (see above), each as the string read, with no
-- table and no tonumber (a number would cost Redis about what a command
-- does); or nil when free. A value it cannot read is a holder '' with
-- fence '0'.
local function holder_of(v)
  if not v then
    return nil
  end
  local tok, fence, id = string.match(v, '^(%S+) (%d+) %d+ (%S*)')
  if not tok then
    return '', '0', ''
  end
  return tok, fence, id
end

-- try_of reads the try number from a Redlock share's id, "<lease id>.<try>"
-- (see redlock_acquire.lua): 0 for none (a share of an older version).
local function try_of(id)
  return tonumber(string.match(id or '', '%.(%d+)$') or '0')
end

-- peek_owner reads the holder of the owner key as holder_of does,
-- changing nothing (a waiter's heartbeat must not touch a lease, not even
-- one handed to its own token).
local function peek_owner(owner)
  return holder_of(redis.call('GET', owner))
end

-- writer_holds reports whether an RWMutex's owner key holds a writer's
-- lease: held, and not by a lone reader (id 'r', see rw_rlock.lua).
local function writer_holds(owner)
  local w, _, id = holder_of(redis.call('GET', owner))
  return w and id ~= 'r'
end

-- owner_value is the owner key's value for the lease tok, taken at clock
-- (server µs) with fence, both decimal strings (see issue_fence). It is
-- joined from strings, not formatted: %s would stop at a zero byte in the
-- metadata, and each number Lua formats costs Redis about what a command
-- does (the milliseconds are the microseconds' digits but the last three).
local function owner_value(tok, fence, clock, id, meta)
  return tok .. ' ' .. fence .. ' ' .. string.sub(clock, 1, -4) .. ' ' .. (id or '') .. ' ' .. meta
end

-- take_owner makes tok the holder of the owner key if it is free, expiring
-- after ttl ms (a decimal string, as the caller sent it; '0': never), and
-- returns the lease's fence, a decimal string; clock is the server's (see
-- clock_us). When the key is held, it changes nothing there and returns
-- nil and the holder's token, fence and id (see holder_of). (It may still
-- have moved the fence key to the clock: harmless, fences only have to
-- rise.)
local function take_owner(owner, fence_key, tok, meta, ttl, clock, id)
  local fence = issue_fence(fence_key, clock)
  local v = owner_value(tok, fence, clock, id, meta)
  local old
  if ttl ~= '0' then
    old = redis.call('SET', owner, v, 'NX', 'PX', ttl, 'GET')
  else
    old = redis.call('SET', owner, v, 'NX', 'GET')
  end
  if old then
    return nil, holder_of(old)
  end
  return fence
end

-- owner_status reads an owner key for a status reply: {1, pttl, fence,
-- meta, since} while held, and the holder's id (a lone reader's is 'r':
-- see rw_rlock.lua), else {0, -2, the last fence, '', 0}.
local function owner_status(owner, fence_key)
  local h = owner_of(redis.call('GET', owner))
  if h then
    return {1, redis.call('PTTL', owner), h.fence, h.meta, h.since}, h.id
  end
  return {0, -2, tonumber(redis.call('GET', fence_key) or '0'), '', 0}
end

-- retried returns the fence of tok's lease (the decimal string read) when
-- holder, the owner key's holder with fence (see holder_of; nil: free),
-- is tok holding it already: a try sent again after its reply was lost,
-- or a waiter's try finding the lock handed to it (see hand_over). The
-- caller counts the lease's TTL from this try, so the key lives at least
-- ttl ms (a decimal string; '0': no expiry) from now; never less than it
-- did, since the first try may run after the second, and after a Refresh
-- that made the lease longer. It returns nil for any other holder.
local function retried(owner, holder, fence, tok, ttl)
  if holder ~= tok then
    return nil
  end
  if ttl ~= '0' then
    redis.call('PEXPIRE', owner, ttl, 'GT')
  else
    redis.call('PERSIST', owner)
  end
  return fence
end

-- claim gives tok the lease on the owner key: by taking it when free says
-- nobody comes first (no queue ahead, no reader) and the key is free, or
-- by finding tok holding it already (a try sent again after its reply was
-- lost, whose TTL then starts anew). ttl is in ms, a decimal string ('0':
-- no expiry); clock the server's (see clock_us). It returns the lease's
-- fence, a decimal string, or nil and the holder's token, fence and id
-- (see holder_of; nil when the key is free but others come first). One
-- GET reads the holder when free is false; one SET NX both takes and
-- reads it when free is true.
local function claim(owner, fence_key, tok, meta, ttl, clock, free, id)
  local fence, holder, hfence, hid
  if free then
    fence, holder, hfence, hid = take_owner(owner, fence_key, tok, meta, ttl, clock, id)
    if fence then
      return fence
    end
  else
    holder, hfence, hid = holder_of(redis.call('GET', owner))
  end
  return retried(owner, holder, hfence, tok, ttl), holder, hfence, hid
end
