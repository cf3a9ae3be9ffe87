-- set_members.lua: list a page of a mutex set's members in name (byte)
-- order, without changing anything.
-- KEYS     the MutexSet layout described in lib/set.lua (13 keys)
-- ARGV[1]  list the members after this name; '' to start at the first
-- ARGV[2]  page size
-- Returns  {where the next page starts ('' after the last page), members:
--           a flat list, 7 entries per member: name, held (0|1), remaining
--           lease in ms (-1: never expires; 0 when free), fence (the
--           holder's, else the last issued; 0 if never used), holder
--           metadata, acquired at (server ms; 0 when free), removing (0|1)}
-- A member whose lease expired shows as free, or not at all if it was
-- removed while held.
local now = now_us()
local now_ms = math.floor(now / 1000)
local size = tonumber(ARGV[2])
local from = '-'
if ARGV[1] ~= '' then
  from = '(' .. ARGV[1]
end
local names = redis.call('ZRANGEBYLEX', KEYS[1], from, '+', 'LIMIT', '0', size)
local out = {}
for _, m in ipairs(names) do
  local fence = tonumber(redis.call('HGET', KEYS[8], m) or '0')
  local removing = redis.call('SISMEMBER', KEYS[9], m)
  local e = set_expiry(m)
  if e and e > now_ms then
    local ttl = -1
    if e ~= math.huge then
      -- From the exact time: the expiry was rounded up to the next ms.
      ttl = math.max(math.floor((e * 1000 - now) / 1000), 1)
    end
    local since = tonumber(redis.call('HGET', KEYS[7], m) or '0')
    local meta = redis.call('HGET', KEYS[6], m) or ''
    for _, v in ipairs({m, 1, ttl, fence, meta, since, removing}) do
      table.insert(out, v)
    end
  elseif removing == 0 then
    for _, v in ipairs({m, 0, 0, fence, '', 0, 0}) do
      table.insert(out, v)
    end
  end
end
local after = ''
if #names == size then
  after = names[#names]
end
return {after, out}
