-- Add one sidecar's second to the cluster's history, in the second of Redis's clock.
-- KEYS[1]  the key prefix (with the history's hash tag); the second is appended
-- ARGV[1]  how long a second is kept (s); ARGV[2] how many counter pairs follow
-- then counter field, increment, ..., then gauge field, value, ...
-- Counters add up over the sidecars; a gauge is the cluster's (each sidecar sees the
-- same), the last writer's.
local second = tonumber(redis.call('TIME')[1])
local key = KEYS[1] .. second
local counters = tonumber(ARGV[2])
local at = 3
for _ = 1, counters do
  redis.call('HINCRBYFLOAT', key, ARGV[at], ARGV[at + 1])
  at = at + 2
end
while ARGV[at] ~= nil do
  redis.call('HSET', key, ARGV[at], ARGV[at + 1])
  at = at + 2
end
redis.call('EXPIRE', key, tonumber(ARGV[1]))
return second
