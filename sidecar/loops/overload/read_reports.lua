-- Every pod's report and stamps, with Redis's clock, in one call. (A script rather than a
-- pipeline with TIME: Redis Cluster clients refuse TIME in a pipeline.)
-- KEYS[1] hash pod → report; KEYS[2] hash pod → "received_ms expires_ms"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2])}
