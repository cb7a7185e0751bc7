-- Store one pod's load report, stamped with Redis's clock.
-- KEYS[1] hash pod → report (protobuf bytes); KEYS[2] hash pod → "received_ms expires_ms"
-- ARGV[1] pod id, ARGV[2] report, ARGV[3] ttl in ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], now .. ' ' .. (now + tonumber(ARGV[3])))
return now
