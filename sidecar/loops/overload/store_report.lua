-- Store pods' load reports, stamped with Redis's clock: one pushed report, or all the
-- reports of one scrape of a group's pods, in one call.
-- KEYS[1] hash pod → report (protobuf bytes); KEYS[2] hash pod → "received_ms expires_ms"
-- ARGV[1] ttl in ms; then pod id, report, pod id, report, …
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stamp = now .. ' ' .. (now + tonumber(ARGV[1]))
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('HSET', KEYS[2], ARGV[i], stamp)
end
return now
