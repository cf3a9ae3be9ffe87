-- batch.lua: the runs of a batched script packed call by call (packCalls
-- in merge.go; owner_renewals.lua is packed its own way), which do the
-- work of many calls of one script. Its ARGV holds, for each call in
-- turn, the number of its keys, the number of its arguments, its keys and
-- its arguments; its KEYS, the first call's first key, which routes the
-- run on Redis Cluster. On a Cluster its calls' keys lie in any slots of
-- the node it runs on: a script without flags (no #! line) may use the
-- keys of every slot its node serves, as before Redis 7.0. (A flagged one
-- would need allow-cross-slot-keys, and Redis would refuse it whole when
-- out of memory, where a renewal alone still runs.)

-- each_call runs one(k, nk, na) for each call of a batched run, k the
-- index in ARGV of its first key, nk its number of keys and na of
-- arguments (which follow the keys), and returns the list of their
-- replies, in order. A call that fails (a Redis error, or a Lua error)
-- has {'dlock:error', message} in its place, not an error reply, which a
-- client may not read inside a list; the calls after it still run. A nil
-- reply is false, the nil a call alone would give, so the list keeps its
-- length. The counts are read through a table of the small ones: each
-- tonumber costs Redis about what a command does.
local function each_call(one)
  local out, a = {}, 1
  local small = {['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6, ['7'] = 7}
  while a <= #ARGV do
    local nk, na = small[ARGV[a]] or tonumber(ARGV[a]), small[ARGV[a + 1]] or tonumber(ARGV[a + 1])
    local ok, r = pcall(one, a + 2, nk, na)
    if not ok then
      r = {'dlock:error', type(r) == 'table' and r.err or tostring(r)}
    elseif r == nil then
      r = false
    end
    out[#out + 1] = r
    a = a + 2 + nk + na
  end
  return out
end
