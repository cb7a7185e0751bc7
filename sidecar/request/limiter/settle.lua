-- Settle a finished request against what it reserved, on every bucket at once
-- (arguments.lua is the protocol: the tokens to give back, negative to take, a debt).
--
-- Each bucket is refilled to now first (bucket_level.lua). The level stays within
-- [-debt, burst]: a bucket in debt admits nothing until it has refilled past the next
-- request's cost. A request reserves at most what its buckets hold; the rest of what
-- its answer cost is owed here, within the debt bound (the tier's max_debt_seconds of
-- rate), so one runaway answer cannot lock a tenant out for longer than that.
--
-- With 'fair': what the tenant was served (fair_entry.lua) is corrected by the same
-- difference, so a refund counts in its share too.
--
-- Returns the first bucket's level (string).

local delta, buckets, groups, problem = arguments(1, 1)
if problem then
  return redis.error_reply('settle.lua: ' .. problem)
end
local first
for _, bucket in ipairs(buckets) do
  local tokens = refilled(bucket.key, bucket.rate, bucket.burst)
  tokens = math.max(-bucket.debt, math.min(bucket.burst, tokens + delta))
  store(bucket.key, tokens, bucket.rate, bucket.burst)
  first = first or tokens
end

local fair = groups.fair
if fair ~= nil then
  local entry = redis.call('HGET', fair.state, 't:' .. fair.tenant)
  if entry then  -- still active: correct its share and the tier's sum
    local s, r, t, w = fair_entry_decoded(entry)
    local sums = redis.call('HMGET', fair.state, '#served', '#at')
    local total = fair_decayed(tonumber(sums[1] or '0'), tonumber(sums[2] or now), fair.window)
    local served = math.max(0, fair_decayed(s, t, fair.window) - delta)
    redis.call('HSET', fair.state,
               't:' .. fair.tenant,
               fair_entry_encoded(served, fair_decayed(r, t, fair.window), now, w),
               '#served', fair_number(math.max(0, total - delta)),
               '#at', tostring(now))
  end
end
return tostring(first)
