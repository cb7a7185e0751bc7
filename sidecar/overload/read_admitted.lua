-- A tier's recent admissions (token_bucket.lua records them), with Redis's clock.
-- KEYS[1]  the tier's record in the layout of sidecars before the record moved into the
--          buckets (hash "<slot>|p|<pool>" → blocks * 2^20 + requests; from sidecars
--          before that, "<slot>|b|<pool>" / "<slot>|n|<pool>" → count): the slots too
--          old to matter to anyone are dropped from it
-- KEYS[1 + i]  the tier's bucket in pool ARGV[3 + i] (fields "r|<slot>" → blocks * 2^20
--          + requests; their writers drop the old ones)
-- ARGV[1]  slot length (ms); ARGV[2] return slots ending less than this long ago (ms);
-- ARGV[3]  delete slots from KEYS[1] that ended longer ago than this (ms)
-- Returns {now (ms), field, value, field, value, …} of the slots returned, each field
-- "<slot>|<kind>|<pool>".
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
-- The slots ending less than `wanted` ago: the current one back to the oldest such.
local last = math.floor(now / slot_ms)
local first = math.max(0, math.floor((now - wanted) / slot_ms))
for k = 2, #KEYS do
  local pool = ARGV[2 + k]
  for from = first, last, 1000 do
    local fields = {}
    for slot = from, math.min(from + 999, last) do
      fields[#fields + 1] = 'r|' .. slot
    end
    local values = redis.call('HMGET', KEYS[k], unpack(fields))
    for j, value in ipairs(values) do
      if value then
        out[#out + 1] = (from + j - 1) .. '|p|' .. pool
        out[#out + 1] = value
      end
    end
  end
end
return out
