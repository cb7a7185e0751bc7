-- A tier's fair-share state, as token_bucket.lua keeps it and settle.lua corrects it:
-- per tenant, field 't:<tenant>' = "served,refused,at (ms),weight": tokens served, and
-- refused by the tier's bucket (it wanted more than it got), decayed over the window;
-- '#weights' sums the active tenants' weights, '#served' (decayed, as of '#at') what
-- they were served.

local function fair_entry_decoded(value)
  local s, r, t, w = string.match(value, '([^,]+),([^,]+),([^,]+),([^,]+)')
  return tonumber(s), tonumber(r), tonumber(t), tonumber(w)
end

local function fair_entry_encoded(served, refused, at, weight)
  return string.format('%.17g,%.17g,%.17g,%.17g', served, refused, at, weight)
end

local function fair_number(value)
  return string.format('%.17g', value)
end

-- `value`, as of `since` (ms), decayed to now.
local function fair_decayed(value, since, window)
  return value * math.exp(-math.max(0, now - since) / window)
end
