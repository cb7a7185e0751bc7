-- Take `cost` tokens from every bucket in KEYS, all or nothing, atomically
-- (arguments.lua is the protocol, bucket_level.lua the arithmetic). With the tier's
-- bucket first, the same call records the admission for its pool's projected load
-- (admission_record.lua) and keeps the tier's fair shares (fair_share.lua): both live
-- in the tier's bucket hash, read with its level in one HMGET and stored with it in one
-- HSET.
--
-- Returns {allowed (1|0), refused bucket index (0 if none), retry after (ms, -1 if
-- never: cost above that bucket's burst), tokens left in bucket 1 (string), when the
-- admission was recorded (Redis time, µs; 0: not recorded), refused for being over its
-- fair share (1|0)}; and when an 'else' set was tried, a seventh: 1, taken from it (the
-- other fields then its own), or 0, refused by it too (the first set's refusal).

local function take(cost, buckets, groups)
  local record, fair = groups.record, groups.fair
  if #buckets == 0 then
    record = nil  -- recorded in the tier's bucket only
  end
  if fair ~= nil then
    fair.merged = #buckets >= 1 and fair.state == buckets[1].key
  end
  local fair_in_level = fair ~= nil and fair.merged
  local fair_got, record_read

  local levels = {}
  local refused, longest_wait, over_share = 0, 0, 0
  for i, bucket in ipairs(buckets) do
    if cost > bucket.burst then
      return {0, i, -1, tostring(bucket.burst), 0, 0}
    end
    local tokens
    if i == 1 and (fair_in_level or record ~= nil) then
      local more = fair_in_level and fair_fields(fair) or {}
      local from = #more
      if record ~= nil then
        local wanted = record_fields_read(record)
        more[from + 1], more[from + 2] = wanted[1], wanted[2]
      end
      local extra
      tokens, extra = refilled(bucket.key, bucket.rate, bucket.burst, more)
      fair_got = fair_in_level and extra or nil
      if record ~= nil then
        record_read = {extra[from + 1], extra[from + 2]}
      end
    else
      tokens = refilled(bucket.key, bucket.rate, bucket.burst)
    end
    levels[i] = tokens
    if tokens < cost then
      local wait = math.ceil((cost - tokens) * 1000 / bucket.rate)
      if wait > longest_wait then
        refused, longest_wait = i, wait
      end
    end
  end

  if fair ~= nil then
    fair_read(fair, fair_got)
    local wait = fair_wait(fair, cost, levels[1], buckets[1].rate)
    if wait ~= nil and wait > longest_wait then
      refused, longest_wait, over_share = 1, wait, 1
    end
  end

  local recorded = record ~= nil and (refused == 0 or record.even_refused)
  local recorded_us = recorded and now_us or 0

  if refused > 0 then
    if fair ~= nil then
      fair_kept(fair, cost, refused > 1 and 'own' or 'refused', false)
    end
    if recorded then  -- the level is not stored: the record alone
      local key = buckets[1].key
      redis.call('HSET', key, unpack(record_fields(key, record, record_read)))
      if redis.call('PTTL', key) < record.keep then
        redis.call('PEXPIRE', key, record.keep)
      end
    end
    return {0, refused, longest_wait, tostring(levels[1]), recorded_us, over_share}
  end

  local first_more, first_keep = {}, nil
  if fair ~= nil then
    first_more, first_keep = fair_kept(fair, cost, 'admitted', fair.merged)
  end
  if recorded then
    for _, value in ipairs(record_fields(buckets[1].key, record, record_read)) do
      first_more[#first_more + 1] = value
    end
    first_keep = math.max(first_keep or 0, record.keep)
  end
  for i, bucket in ipairs(buckets) do
    if i == 1 then
      store(bucket.key, levels[i] - cost, bucket.rate, bucket.burst, first_more, first_keep)
    else
      store(bucket.key, levels[i] - cost, bucket.rate, bucket.burst)
    end
  end
  return {1, 0, 0, tostring(levels[1] - cost), recorded_us, 0}
end

local cost, buckets, groups, problem = arguments(1, 1)
if problem then
  return redis.error_reply('token_bucket.lua: ' .. problem)
end
local verdict = take(cost, buckets, groups)
local otherwise = groups.otherwise
-- The other set only for a refusal by the tier's bucket (not the tenant's own, not for
-- a fair share, not one no wait mends) longer than the request waits: a shed.
if otherwise == nil or verdict[1] == 1 or verdict[2] ~= 1 or verdict[6] == 1
    or verdict[3] < 0 or verdict[3] <= otherwise.beyond then
  return verdict
end
local cost2, buckets2, groups2, problem2 = arguments(otherwise.key_at, otherwise.arg_at)
if problem2 then
  return redis.error_reply('token_bucket.lua (else): ' .. problem2)
end
local there = take(cost2, buckets2, groups2)
if there[1] == 1 then
  there[7] = 1  -- taken from the other set
  return there
end
verdict[7] = 0  -- the other set refused too: the first set's refusal stands
return verdict
