-- What token_bucket.lua and settle.lua share, put before each when it is loaded
-- (limiter/redis_buckets.py): Redis's clock, a bucket's level refilled to now, and its
-- store. Time is Redis's own (TIME), never a caller's: sidecars on many hosts share the
-- buckets and their clocks differ. A missing key is a full bucket, so every key expires
-- once it would have refilled anyway.

local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + tonumber(now_parts[2]) / 1000  -- ms

local function refilled(key, rate, burst)
  local state = redis.call('HMGET', key, 'tokens', 'ts')
  local tokens, ts = tonumber(state[1]), tonumber(state[2])
  if tokens == nil or ts == nil then
    return burst
  end
  return math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
end

local function store(key, tokens, rate, burst)
  redis.call('HSET', key, 'tokens', tostring(tokens), 'ts', tostring(now))
  redis.call('PEXPIRE', key, math.ceil((burst - tokens) * 1000 / rate) + 1000)
end
