-- Add latency samples to the tiers' cluster-wide windows, stamped with Redis's clock.
-- KEYS[i]  the list of tier i's samples, newest first
-- ARGV[1]  window (samples kept per tier); then per key: a count n, then n samples
--          "met value_ms kind"; each is stored as "now_ms met value_ms kind".
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local at = 2
for i = 1, #KEYS do
  local n = tonumber(ARGV[at])
  for j = 1, n do
    redis.call('LPUSH', KEYS[i], now .. ' ' .. ARGV[at + j])
  end
  at = at + n + 1
  redis.call('LTRIM', KEYS[i], 0, window - 1)
end
return now
