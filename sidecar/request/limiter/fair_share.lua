-- Fair shares between a tier's tenants (docs/fair-shares.md), kept by the call that
-- charges the tier's bucket (token_bucket.lua), in the layout of fair_entry.lua. A
-- tenant is active while it asked within `active_ms`. Cheap on the common path (one
-- HMGET, one HSET): every FAIR_SWEEP_MS a sweep looks at the tenants whose score in the
-- sorted set (when they were first seen, or last swept) is older than that; those that
-- asked since get their last ask as score, the others (at most 100 a sweep) leave the
-- sums. The sweep renews the keys' expiry too.

local FAIR_SWEEP_MS = 100

-- The state's fields a call reads: with the bucket's level, when the state is its hash.
local function fair_fields(fair)
  return {'#weights', '#served', '#at', '#swept', 't:' .. fair.tenant}
end

-- The tier's sums and the tenant's entry, decayed to now (`got`: fair_fields' values,
-- when read with the level), with the quiet tenants swept out when a sweep is due.
local function fair_read(fair, got)
  got = got or redis.call('HMGET', fair.state, unpack(fair_fields(fair)))
  local weights = tonumber(got[1] or '0')
  local total = fair_decayed(tonumber(got[2] or '0'), tonumber(got[3] or now), fair.window)
  local mine = got[5]
  fair.swept = now - tonumber(got[4] or '0') >= FAIR_SWEEP_MS
  if fair.swept then
    local quiet = redis.call('ZRANGEBYSCORE', fair.active, '-inf', now - fair.active_ms,
                             'LIMIT', 0, 100)
    for _, name in ipairs(quiet) do
      local gone = name == fair.tenant and mine or redis.call('HGET', fair.state, 't:' .. name)
      local s, _, t, w
      if gone then
        s, _, t, w = fair_entry_decoded(gone)
      end
      if gone and t > now - fair.active_ms then
        redis.call('ZADD', fair.active, t, name)  -- asked since its score was last set
      else
        if gone then
          weights = weights - w
          total = total - fair_decayed(s, t, fair.window)
          redis.call('HDEL', fair.state, 't:' .. name)
        end
        redis.call('ZREM', fair.active, name)
        if name == fair.tenant then
          mine = false
        end
      end
    end
  end
  fair.entry = {served = 0, refused = 0}
  if mine then
    local s, r, t, w = fair_entry_decoded(mine)
    fair.entry.served = fair_decayed(s, t, fair.window)
    fair.entry.refused = fair_decayed(r, t, fair.window)
    fair.mine_at = t
    weights = weights - w  -- its weight may have changed: counted anew below
  end
  fair.others = math.max(0, weights)
  fair.weights = fair.others + fair.weight
  fair.total = math.max(total, fair.entry.served)
end

-- How long (ms) the tenant waits for its share: over it, it may not take the tier's
-- bucket (at `level`, refilling at `rate`) below the reserve, kept for those under
-- theirs; nil when it may. Over its share: served more per unit of weight than the
-- tier's active tenants were on average; alone in the tier, it is owed no one. (A
-- tenant under its weight's part of the rate of a contended tier, whose tenants are
-- served the whole rate, is under the average; one that asks for less than its part is
-- never over it.) Both sides count half of this request: admitted while under, each
-- tenant's service then runs a sawtooth around its share itself, whatever its weight
-- (counted whole or not at all, a light tenant would overshoot its share by more than a
-- heavy one).
local function fair_wait(fair, cost, level, rate)
  local over = fair.others > fair.weight * 1e-9
    and (fair.entry.served + cost / 2) / fair.weight > (fair.total + cost / 2) / fair.weights
  if over and level - cost < fair.reserve then
    return math.ceil((fair.reserve + cost - level) * 1000 / rate)
  end
  return nil
end

-- What the fair shares keep of this call, whose outcome is 'admitted', 'refused' (by the
-- tier's bucket) or 'own' (refused by the tenant's own budget: it does not contend for
-- the tier's). With `with_level`, returns the fields and until when (ms) the hash must
-- live, to be stored with the bucket's level; else stores them itself.
local function fair_kept(fair, cost, outcome, with_level)
  local fields = {}
  if outcome == 'own' then
    if fair.mine_at == nil then
      fair.weights = fair.weights - fair.weight  -- not active: out of the sum again
    end
    if not fair.swept then
      return {}  -- nothing changed
    end
  else
    if outcome == 'admitted' then
      fair.entry.served = fair.entry.served + cost
      fair.total = fair.total + cost
    else
      fair.entry.refused = fair.entry.refused + cost
    end
    fields = {'t:' .. fair.tenant,
              fair_entry_encoded(fair.entry.served, fair.entry.refused, now, fair.weight)}
    if fair.mine_at == nil then  -- new: its score is kept up to date by the sweeps
      redis.call('ZADD', fair.active, now, fair.tenant)
    end
  end
  local kept = {'#weights', fair_number(math.max(0, fair.weights)),
                '#served', fair_number(math.max(0, fair.total)), '#at', tostring(now)}
  for _, value in ipairs(fields) do
    kept[#kept + 1] = value
  end
  -- Both live as long as each other: a tenant in the state is always in the set.
  local keep = math.ceil(fair.active_ms + fair.window + 2 * FAIR_SWEEP_MS)
  if fair.swept then
    kept[#kept + 1], kept[#kept + 2] = '#swept', tostring(now)
    redis.call('PEXPIRE', fair.active, keep)
  end
  if with_level then
    return kept, keep
  end
  redis.call('HSET', fair.state, unpack(kept))
  -- The bucket's hash (merged) is only ever given a later expiry, never a sooner one;
  -- this runs once a sweep (100 ms) at most, so its PTTL costs next to nothing.
  if fair.swept and (not fair.merged or redis.call('PTTL', fair.state) < keep) then
    redis.call('PEXPIRE', fair.state, keep)
  end
  return {}
end
