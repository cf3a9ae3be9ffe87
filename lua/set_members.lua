-- set_members.lua: list a page of a mutex set's members, in no order (the
-- client sorts them), without changing anything.
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys)
-- ARGV[1]  the cursor where the page starts: '0' for the first page
-- ARGV[2]  about how many members a page holds
-- Returns  {the cursor of the next page ('0' after the last page),
--           members: a flat list, 7 entries per member: name, held
--           (0|1), remaining lease in ms (-1: never expires; 0 when free),
--           fence (the holder's, else the last issued; 0 if never used),
--           holder metadata, acquired at (server ms; 0 when free),
--           removing (0|1)}
-- A member may come on two pages (ZSCAN's promise: every member there
-- all along comes at least once). A member whose lease expired shows as
-- free, or not at all if it was removed while held.
local now = now_us()
local page = redis.call('ZSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local scores = page[2]
local out = {}
for i = 1, #scores, 2 do
  local m, s = scores[i], scores[i + 1]
  local r = redis.call('HGET', KEYS[2], set_field(m))
  local tok, flag, fence, since, meta
  if r then
    tok, flag, fence, since, meta = string.match(r, '^(%S+) (%S) (%d+) (%d+) (.*)$')
  end
  if set_live(s, now) and tok then
    local ttl = -1
    if s ~= 'inf' then
      ttl = math.max(math.floor((tonumber(s) + 0.5 - now) / 1000), 1)
    end
    local removing = flag == 'r' and 1 or 0
    for _, v in ipairs({m, 1, ttl, tonumber(fence), meta, tonumber(since), removing}) do
      table.insert(out, v)
    end
  elseif not (tok and flag == 'r') then
    for _, v in ipairs({m, 0, 0, tonumber(fence or '0'), '', 0, 0}) do
      table.insert(out, v)
    end
  end
end
return {page[1], out}
