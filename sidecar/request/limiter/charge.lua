-- Charge what a sidecar admitted from a bucket's headroom (limiter/headroom.py), summed,
-- behind the admissions: taken whether the bucket holds it or not, into debt down to
-- its most (arguments.lua is the protocol: the tokens, one bucket, the tier's). The
-- same call records the admissions for their pool's projected load ('record' and
-- 'count': their blocks summed, how many) and counts them in the tenant's fair share
-- ('fair'), as token_bucket.lua does one at a time.
--
-- Returns {the bucket's level after it (string), Redis time (µs) of the record}.

local tokens, buckets, groups, problem = arguments(1, 1)
if problem then
  return redis.error_reply('charge.lua: ' .. problem)
end
if #buckets ~= 1 then
  return redis.error_reply('charge.lua: one bucket, the tier\'s')
end
local bucket, record = buckets[1], groups.record
local more, read = {}, nil
if record ~= nil then
  record.requests = groups.count
  more = record_fields_read(record)
end
local level
level, read = refilled(bucket.key, bucket.rate, bucket.burst, more)
level = math.max(-bucket.debt, level - tokens)
local fields, keep = {}, nil
if record ~= nil then
  fields, keep = record_fields(bucket.key, record, read), record.keep
end
store(bucket.key, level, bucket.rate, bucket.burst, fields, keep)
local fair = groups.fair
if fair ~= nil then  -- as token_bucket.lua keeps an admission, its sweep included
  fair.merged = fair.state == bucket.key
  fair_read(fair)
  fair_kept(fair, tokens, 'admitted', false)
end
return {tostring(level), record ~= nil and now_us or 0}
