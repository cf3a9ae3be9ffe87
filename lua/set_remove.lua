-- set_remove.lua: remove members from a mutex set. A free member (or one
-- whose lease expired) leaves at once. A held one is marked: nobody can
-- acquire it any more, its holder keeps it undisturbed, and it leaves the
-- set when that lease is released or expires. Names not in the set are
-- ignored. An emptied set deletes all its keys. A set in the layout of an
-- older dlock is converted first (set_convert).
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys), and
--          the older layout's other keys (see set_convert)
-- ARGV[1…] the members
-- Returns  {members removed now, members left to their holders}
set_convert()
local now = now_us()
local removed, pending = 0, 0
for i = 1, #ARGV do
  local m = ARGV[i]
  local s = redis.call('ZSCORE', KEYS[1], m)
  if set_live(s, now) then
    if redis.call('SADD', KEYS[3], m) == 1 then
      local f = set_field(m)
      local r = redis.call('HGET', KEYS[2], f)
      local t = string.match(r, '^(%S+) ')
      redis.call('HSET', KEYS[2], f, t .. ' r' .. string.sub(r, #t + 3))
      pending = pending + 1
    end
  elseif s then
    set_claim(m, s)
    set_forget(m)
    removed = removed + 1
  end
end
if removed + pending > 0 then
  set_fade()
end
return {removed, pending}
