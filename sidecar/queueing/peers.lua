-- Publish this sidecar's in-flight count and read its peers', on Redis's clock.
-- KEYS[1] hash: sidecar id → "in_flight expires_ms"
-- ARGV[1] my id, ARGV[2] my in-flight count, ARGV[3] ttl in ms
-- Returns {sum of fresh peers' counts (not mine), fresh peers (not me)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. (now + tonumber(ARGV[3])))
local entries = redis.call('HGETALL', KEYS[1])
local total, peers = 0, 0
for i = 1, #entries, 2 do
  local id, value = entries[i], entries[i + 1]
  local space = string.find(value, ' ')
  local count, expires = tonumber(string.sub(value, 1, space - 1)), tonumber(string.sub(value, space + 1))
  if expires <= now then
    if now - expires > 60000 then
      redis.call('HDEL', KEYS[1], id)
    end
  elseif id ~= ARGV[1] then
    total = total + count
    peers = peers + 1
  end
end
return {total, peers}
