-- A pool's recent admissions, recorded by the call that charges them (one, or the
-- `requests` a sidecar charges behind them at once) in the tier's bucket of that pool
-- (KEYS[1]), for every sidecar's projection of the pool's load
-- (overload/admitted.py; read back by overload/read_admitted.lua). Per slot of `slot`
-- ms, field "r|<slot>" = blocks * 2^20 + requests, so one number counts both. '#r' is
-- the last slot written: when a slot starts, the slots that ended more than `keep` ago
-- are dropped (those between '#r' and that: one field a slot, in steady traffic), and
-- the hash is kept that long at least.

local RECORD_PACKED = 1048576  -- 2^20: requests in one slot stay below it

-- The fields a call reads, with the bucket's level.
local function record_fields_read(record)
  record.at_slot = math.floor(now / record.slot)
  record.field = 'r|' .. record.at_slot
  return {record.field, '#r'}
end

-- The fields to store with the bucket (the old slots dropped first); `read`: the values
-- of record_fields_read's fields.
local function record_fields(key, record, read)
  local added = record.blocks * RECORD_PACKED + (record.requests or 1)
  local fields = {record.field, string.format('%d', tonumber(read[1] or '0') + added)}
  if not read[1] then  -- the slot starts here
    local last = tonumber(read[2] or '')
    if last ~= nil then
      local span = math.ceil(record.keep / record.slot)
      local old = {}
      for s = math.max(last - span + 1, 0), math.min(last, record.at_slot - span) do
        old[#old + 1] = 'r|' .. s
      end
      if #old > 0 then
        redis.call('HDEL', key, unpack(old))
      end
    end
    fields[3], fields[4] = '#r', tostring(math.max(last or 0, record.at_slot))
  end
  return fields
end
