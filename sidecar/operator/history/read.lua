-- A stretch of the history's seconds, by Redis's clock.
-- KEYS[1]  the key prefix; ARGV[1] how many seconds; ARGV[2] how many seconds before the
-- current one the stretch ends (0: it ends with the current second)
-- Returns {now (s), second, {field, value, ...}, second, {...}, ...} for the seconds kept.
local now = tonumber(redis.call('TIME')[1])
local last = now - tonumber(ARGV[2] or 0)
local out = {now}
for second = last - tonumber(ARGV[1]) + 1, last do
  local fields = redis.call('HGETALL', KEYS[1] .. second)
  if #fields > 0 then
    out[#out + 1] = second
    out[#out + 1] = fields
  end
end
return out
