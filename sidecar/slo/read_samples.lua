-- The tiers' sample windows, with Redis's clock, in one call. (A script rather than a
-- pipeline with TIME: Redis Cluster clients refuse TIME in a pipeline.)
-- KEYS[i] the list of tier i's samples; ARGV[1] how many samples to read from each
local t = redis.call('TIME')
local reply = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)}
for i = 1, #KEYS do
  reply[i + 1] = redis.call('LRANGE', KEYS[i], 0, tonumber(ARGV[1]) - 1)
end
return reply
