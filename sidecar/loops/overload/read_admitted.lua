-- A tier's recent admissions in every pool (admission_record.lua records them in the
-- tier's bucket of each pool; its writers drop the old slots), with Redis's clock.
-- KEYS[i]  the tier's bucket in pool ARGV[2 + i] (fields "r|<slot>" → blocks * 2^20
--          + requests)
-- ARGV[1]  slot length (ms); ARGV[2] return slots ending less than this long ago (ms)
-- Returns {now (µs), pool, slot, value, pool, slot, value, …} of the slots returned.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local slot_ms, wanted = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {now_us}
-- The slots ending less than `wanted` ago: the current one back to the oldest such.
local last = math.floor(now / slot_ms)
local first = math.max(0, math.floor((now - wanted) / slot_ms))
for k = 1, #KEYS do
  local pool = ARGV[2 + k]
  for from = first, last, 1000 do  -- unpack's stack is bounded
    local fields = {}
    for slot = from, math.min(from + 999, last) do
      fields[#fields + 1] = 'r|' .. slot
    end
    local values = redis.call('HMGET', KEYS[k], unpack(fields))
    for j, value in ipairs(values) do
      if value then
        out[#out + 1] = pool
        out[#out + 1] = from + j - 1
        out[#out + 1] = value
      end
    end
  end
end
return out
