-- Settle a finished request against what it reserved, on every bucket in KEYS at once.
--
-- KEYS[i]        a bucket (hash: tokens, ts); all keys share one hash tag (one slot)
-- ARGV[1]        tokens to give back (negative: to take, a debt)
-- ARGV[2i], ARGV[2i+1]   rate (tokens/s) and burst (tokens) of KEYS[i]
--
-- Each bucket is refilled to now first, on Redis's clock, as token_bucket.lua does. The
-- level stays within [-burst, burst]: a bucket in debt admits nothing until it has
-- refilled past the next request's cost, and a debt is bounded by one burst, so one
-- runaway answer cannot lock a tenant out for long.
--
-- Returns the first bucket's level (string).

local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + tonumber(now_parts[2]) / 1000  -- ms
local delta = tonumber(ARGV[1])
local first

for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'ts')
  local tokens, ts = tonumber(state[1]), tonumber(state[2])
  if tokens == nil or ts == nil then
    tokens, ts = burst, now
  end
  tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
  tokens = math.max(-burst, math.min(burst, tokens + delta))
  redis.call('HSET', KEYS[i], 'tokens', tostring(tokens), 'ts', tostring(now))
  redis.call('PEXPIRE', KEYS[i], math.ceil((burst - tokens) * 1000 / rate) + 1000)
  first = first or tokens
end
return tostring(first)
