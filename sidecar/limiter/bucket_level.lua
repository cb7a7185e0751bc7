-- What token_bucket.lua and settle.lua share, put before each when it is loaded
-- (limiter/redis_buckets.py): Redis's clock, a bucket's level refilled to now, and its
-- store. Time is Redis's own (TIME), never a caller's: sidecars on many hosts share the
-- buckets and their clocks differ. A missing key is a full bucket, so every key lives at
-- least until it would have refilled anyway; its field 'x' says until when its expiry
-- is set (Redis ms), so the expiry is pushed out only when a store needs it later, and
-- then a whole refill further: one PEXPIRE a refill time, not one a request.

local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + tonumber(now_parts[2]) / 1000  -- ms
local expires = {}  -- key → its field 'x', as read

local function refilled(key, rate, burst)
  local state = redis.call('HMGET', key, 'tokens', 'ts', 'x')
  local tokens, ts = tonumber(state[1]), tonumber(state[2])
  expires[key] = tonumber(state[3])
  if tokens == nil or ts == nil then
    return burst
  end
  return math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
end

local function store(key, tokens, rate, burst)
  local needed = now + math.ceil((burst - tokens) * 1000 / rate) + 1000
  local set = expires[key]
  if set ~= nil and set >= needed then
    redis.call('HSET', key, 'tokens', tostring(tokens), 'ts', tostring(now))
    return
  end
  -- A new key expires as soon as it may (when it would be full); a busy one, whose
  -- expiry keeps moving out, gets a refill's time more each time, so not every store
  -- has to push it.
  local until_ms = set == nil and needed or math.ceil(needed + burst * 1000 / rate)
  redis.call('HSET', key, 'tokens', tostring(tokens), 'ts', tostring(now), 'x',
             tostring(until_ms))
  redis.call('PEXPIRE', key, math.ceil(until_ms - now))
end
