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
  -- One LPUSH a thousand samples (unpack's stack is bounded), not one a sample.
  for first = 1, n, 1000 do
    local stamped = {}
    for j = first, math.min(n, first + 999) do
      stamped[#stamped + 1] = now .. ' ' .. ARGV[at + j]
    end
    redis.call('LPUSH', KEYS[i], unpack(stamped))
  end
  at = at + n + 1
  if n > 0 then
    redis.call('LTRIM', KEYS[i], 0, window - 1)
  end
end
return now
