-- The history's last seconds, by Redis's clock.
-- KEYS[1]  the key prefix; ARGV[1] how many seconds, up to and including the current one
-- Returns {now (s), second, {field, value, ...}, second, {...}, ...} for the seconds kept.
local now = tonumber(redis.call('TIME')[1])
local out = {now}
for second = now - tonumber(ARGV[1]) + 1, now do
  local fields = redis.call('HGETALL', KEYS[1] .. second)
  if #fields > 0 then
    out[#out + 1] = second
    out[#out + 1] = fields
  end
end
return out
