-- set_remove.lua: remove members from a mutex set. A free member (or one
-- whose lease expired) leaves at once. A held one is marked: nobody can
-- acquire it any more, its holder keeps it undisturbed, and it leaves the
-- set when that lease is released or expires. Names not in the set are
-- ignored. An emptied set deletes all its keys.
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1…] the members
-- Returns  {members removed now, members left to their holders}
local now_ms = time_ms()
local removed, pending = 0, 0
for i = 1, #ARGV do
  local m = ARGV[i]
  if redis.call('ZSCORE', KEYS[1], m) then
    local e = set_expiry(m)
    if e and e > now_ms then
      pending = pending + redis.call('SADD', KEYS[9], m)
    else
      if e then
        set_vacate(m, int(e * 1000))
      end
      set_forget(m)
      removed = removed + 1
    end
  end
end
if removed + pending > 0 then
  set_fade()
end
return {removed, pending}
