-- Publish this sidecar's in-flight counts and read its peers', on Redis's clock.
-- KEYS[1] hash: sidecar id → "in_flight expires_ms" (all pools; read by every version)
-- KEYS[2] hash: sidecar id → "expires_ms pool=count pool=count ..." (per model pool)
-- ARGV[1] my id, ARGV[2] my in-flight count, ARGV[3] ttl in ms, ARGV[4..] pool=count
-- Returns {sum of fresh peers' counts (not mine), fresh peers (not me), {pool, count, ...}}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires_at = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ' ' .. expires_at)
redis.call('HSET', KEYS[2], ARGV[1], expires_at .. ' ' .. table.concat(ARGV, ' ', 4))

local total, peers = 0, 0
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local id, value = entries[i], entries[i + 1]
  local space = string.find(value, ' ')
  local count, expires = tonumber(string.sub(value, 1, space - 1)), tonumber(string.sub(value, space + 1))
  if expires <= now then
    if now - expires > 60000 then
      redis.call('HDEL', KEYS[1], id)
      redis.call('HDEL', KEYS[2], id)
    end
  elseif id ~= ARGV[1] then
    total = total + count
    peers = peers + 1
  end
end

local per_pool = {}
entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  local id, value = entries[i], entries[i + 1]
  local expires
  for word in string.gmatch(value, '%S+') do
    if expires == nil then
      expires = tonumber(word)
      if expires <= now or id == ARGV[1] then
        break
      end
    else
      local equals = string.find(word, '=', 1, true)
      local pool = string.sub(word, 1, equals - 1)
      per_pool[pool] = (per_pool[pool] or 0) + tonumber(string.sub(word, equals + 1))
    end
  end
end
local flat = {}
for pool, count in pairs(per_pool) do
  flat[#flat + 1] = pool
  flat[#flat + 1] = count
end
return {total, peers, flat}
