-- set_convert.lua: convert a mutex set kept in the layout of an older
-- dlock, whose scripts met WRONGTYPE on it, to this one (see set_convert
-- in lib/set.lua). Running it again, or on a set in this layout, changes
-- nothing.
-- KEYS     the MutexSet layout described in lib/set.lua (7 keys), and
--          the older layout's other keys (see set_convert)
-- ARGV     none
-- Returns  1 when it converted the set, else 0.
if set_convert() then
  return 1
end
return 0
