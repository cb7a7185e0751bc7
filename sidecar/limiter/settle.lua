-- Settle a finished request against what it reserved, on every bucket in KEYS at once.
--
-- KEYS[i]        a bucket (hash: tokens, ts); all keys share one hash tag (one slot)
-- ARGV[1]        tokens to give back (negative: to take, a debt)
-- ARGV[3i-1], ARGV[3i], ARGV[3i+1]   rate (tokens/s), burst and most debt (tokens) of
--                KEYS[i]
--
-- Each bucket is refilled to now first (bucket_level.lua, loaded before this). The
-- level stays within [-debt, burst]: a bucket in debt admits nothing until it has
-- refilled past the next request's cost. A request reserves at most what its buckets
-- hold; the rest of what its answer cost is owed here, within the debt bound (the
-- tier's max_debt_seconds of rate), so one runaway answer cannot lock a tenant out
-- for longer than that.
--
-- Optional, after the triples: 'fair', tenant, window (ms), with the tier's fair-share
-- state (hash) as the last KEYS: what the tenant was served (token_bucket.lua) is
-- corrected by the same difference, so a refund counts in its share too.
--
-- Returns the first bucket's level (string).

local delta = tonumber(ARGV[1])
local n = #KEYS
local fair
if ARGV[#ARGV - 2] == 'fair' then  -- the 'fair' group, and its key
  n = n - 1
  fair = {state = KEYS[n + 1], tenant = ARGV[#ARGV - 1], window = tonumber(ARGV[#ARGV])}
end
local first

for i = 1, n do
  local rate = tonumber(ARGV[3 * i - 1])
  local burst = tonumber(ARGV[3 * i])
  local debt = tonumber(ARGV[3 * i + 1])
  local tokens = refilled(KEYS[i], rate, burst)
  tokens = math.max(-debt, math.min(burst, tokens + delta))
  store(KEYS[i], tokens, rate, burst)
  first = first or tokens
end

if fair ~= nil then
  local entry = redis.call('HGET', fair.state, 't:' .. fair.tenant)
  if entry then  -- still active: correct its share and the tier's sum
    local s, r, t, w = string.match(entry, '([^,]+),([^,]+),([^,]+),([^,]+)')
    local decay = math.exp(-math.max(0, now - tonumber(t)) / fair.window)
    local served = math.max(0, tonumber(s) * decay - delta)
    local sums = redis.call('HMGET', fair.state, '#served', '#at')
    local total = tonumber(sums[1] or '0')
    total = total * math.exp(-math.max(0, now - tonumber(sums[2] or now)) / fair.window)
    redis.call('HSET', fair.state, 't:' .. fair.tenant,
               string.format('%.17g,%.17g,%.17g,%s', served, tonumber(r) * decay, now, w),
               '#served', string.format('%.17g', math.max(0, total - delta)),
               '#at', tostring(now))
  end
end
return tostring(first)
