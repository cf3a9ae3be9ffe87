-- owner_refreshes.lua: owner_refresh.lua for many leases in one run (see
-- lib/batch.lua).
-- KEYS[1]  the first call's owner key
-- ARGV     the calls, each with owner_refresh.lua's KEYS and ARGV
-- Returns  the list of the calls' replies (owner_refresh.lua's), in order
return each_call(function(k, _, na)
  local publish, channel
  if na == 4 then
    publish, channel = ARGV[k + 3], ARGV[k + 4]
  end
  return refresh_owner(ARGV[k], ARGV[k + 1], ARGV[k + 2], publish, channel)
end)
