-- A bucket: Redis's clock, its level refilled to now, and its store. Time is Redis's
-- own (TIME), never a caller's: sidecars on many hosts share the buckets and their
-- clocks differ. A missing key is a full bucket, so every key lives at least until it
-- would have refilled anyway. Its field 'x' says until when its expiry is set (Redis
-- ms), so the expiry is pushed out only when a store needs it later, and then by more
-- than it needs: one PEXPIRE a refill time, not one a request. A tier's bucket also
-- holds its fair shares and its pool's recent admissions, read and written with it.

local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + tonumber(now_parts[2]) / 1000  -- ms
-- To the microsecond, as admissions are recorded: two scripts never share one (each
-- runs longer), so a read of the records and a write of one are never in doubt.
local now_us = tonumber(now_parts[1]) * 1000000 + tonumber(now_parts[2])
local expires = {}  -- key → its field 'x', as read

-- The level refilled to now, and the values of `more` fields of the same hash (read in
-- the same HMGET).
local function refilled(key, rate, burst, more)
  local state = redis.call('HMGET', key, 'tokens', 'ts', 'x', unpack(more or {}))
  local tokens, ts = tonumber(state[1]), tonumber(state[2])
  expires[key] = tonumber(state[3])
  local extra = {}
  for i = 4, #state do
    extra[i - 3] = state[i]
  end
  if tokens == nil or ts == nil then
    return burst, extra
  end
  return math.min(burst, tokens + math.max(0, now - ts) * rate / 1000), extra
end

-- The key is to live `life` ms more at least: its expiry is pushed out, by `slack`
-- more, only if it is set sooner. Returns the field pair to store with the hash and the
-- PEXPIRE to send after that store (a missing key takes no expiry), or nothing.
local function outlive(key, life, slack)
  local set = expires[key]
  if set ~= nil and set >= now + life then
    return {}, nil
  end
  -- A new key expires as soon as it may; a busy one, whose expiry keeps moving out,
  -- gets the slack each time, so not every store has to push it.
  local ttl = set == nil and life or math.ceil(life + slack)
  expires[key] = now + ttl
  return {'x', tostring(now + ttl)}, ttl
end

-- Store the level, with `more` field pairs of the same hash; the key lives until it
-- would be full again, and `keep` ms more at least if given.
local function store(key, tokens, rate, burst, more, keep)
  local life = math.max(math.ceil((burst - tokens) * 1000 / rate) + 1000, keep or 0)
  local slack = math.max(burst * 1000 / rate, keep or 0)
  local expiry, ttl = outlive(key, life, slack)
  local stamp = tostring(now)
  local fields = {'tokens', tostring(tokens), 'ts', stamp}
  for _, list in ipairs({expiry, more or {}}) do
    for _, value in ipairs(list) do
      fields[#fields + 1] = value
    end
  end
  redis.call('HSET', key, unpack(fields))
  if ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
