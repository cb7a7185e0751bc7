-- A tier's recent admissions (token_bucket.lua records them), with Redis's clock; drops
-- those too old to matter to anyone.
-- KEYS[1]  the tier's record (hash "<slot>|p|<pool>" → blocks * 2^20 + requests; from
--          sidecars before that, "<slot>|b|<pool>" / "<slot>|n|<pool>" → count)
-- ARGV[1]  slot length (ms); ARGV[2] return slots ending less than this long ago (ms);
-- ARGV[3]  delete slots that ended longer ago than this (ms)
-- Returns {now (ms), field, value, field, value, …} of the slots returned.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local slot_ms = tonumber(ARGV[1])
local wanted, kept = tonumber(ARGV[2]), tonumber(ARGV[3])
local out, old = {now}, {}
local pairs_ = redis.call('HGETALL', KEYS[1])
for i = 1, #pairs_, 2 do
  local slot = tonumber(string.match(pairs_[i], '^(%d+)|'))
  local age = slot and now - (slot + 1) * slot_ms
  if age == nil or age > kept then
    old[#old + 1] = pairs_[i]
  elseif age < wanted then
    out[#out + 1] = pairs_[i]
    out[#out + 1] = pairs_[i + 1]
  end
end
for i = 1, #old, 1000 do  -- unpack's stack is bounded
  redis.call('HDEL', KEYS[1], unpack(old, i, math.min(i + 999, #old)))
end
return out
