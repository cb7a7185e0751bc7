-- Settle a finished request against what it reserved, on every bucket in KEYS at once.
--
-- KEYS[i]        a bucket (hash: tokens, ts); all keys share one hash tag (one slot)
-- ARGV[1]        tokens to give back (negative: to take, a debt)
-- ARGV[2i], ARGV[2i+1]   rate (tokens/s) and burst (tokens) of KEYS[i]
--
-- Each bucket is refilled to now first (bucket_level.lua, loaded before this). The
-- level stays within [-burst, burst]: a bucket in debt admits nothing until it has
-- refilled past the next request's cost, and a debt is bounded by one burst, so one
-- runaway answer cannot lock a tenant out for long.
--
-- Returns the first bucket's level (string).

local delta = tonumber(ARGV[1])
local first

for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  local tokens = refilled(KEYS[i], rate, burst)
  tokens = math.max(-burst, math.min(burst, tokens + delta))
  store(KEYS[i], tokens, rate, burst)
  first = first or tokens
end
return tostring(first)
