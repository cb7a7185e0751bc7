-- Take `cost` tokens from every bucket in KEYS, all or nothing, atomically; record the
-- admission for the pools' projected load (overload/admitted.py) and keep the tier's
-- fair shares between its tenants (docs/fair-shares.md) in the same call.
--
-- KEYS[i], i <= n   a bucket (hash: tokens, ts); all keys share one hash tag (one slot)
-- ARGV[1]           cost, in tokens
-- ARGV[2i], ARGV[2i+1]   rate (tokens/s) and burst (tokens) of KEYS[i]
-- then optional groups, each named by its first argument, each with the next KEYS:
--   'record', KV blocks, pool, slot (ms), keep (ms), record even if refused (1|0)
--        KEYS: where the pool's recent admissions are recorded: the tier's bucket in
--        that pool, KEYS[1] itself (then read and written with the level), or a hash
--        of its own (the layout of sidecars before that)
--   'fair', tenant, weight, window (ms), active (ms), reserve (tokens)
--        KEYS: the tier's fair-share state (hash), its active tenants (sorted set)
--
-- Buckets are refilled and stored as bucket_level.lua (loaded before this) does: on
-- Redis's own clock, a missing key a full bucket.
--
-- Returns {allowed (1|0), refused bucket index (0 if none), retry after (ms, -1 if
-- never: cost above that bucket's burst), tokens left in bucket 1 (string), when the
-- admission was recorded (Redis time, ms; 0: not recorded), refused for being over its
-- fair share (1|0)}.

local cost = tonumber(ARGV[1])
local n, at = 0, 2
while ARGV[at] ~= nil and tonumber(ARGV[at]) ~= nil do
  n, at = n + 1, at + 2
end
local next_key = n + 1
local record, fair
while ARGV[at] ~= nil do
  if ARGV[at] == 'record' then
    record = {key = KEYS[next_key], blocks = tonumber(ARGV[at + 1]), pool = ARGV[at + 2],
              slot = tonumber(ARGV[at + 3]), keep = tonumber(ARGV[at + 4]),
              even_refused = ARGV[at + 5] == '1'}
    next_key, at = next_key + 1, at + 6
  elseif ARGV[at] == 'fair' then
    fair = {state = KEYS[next_key], active = KEYS[next_key + 1], tenant = ARGV[at + 1],
            weight = tonumber(ARGV[at + 2]), window = tonumber(ARGV[at + 3]),
            active_ms = tonumber(ARGV[at + 4]), reserve = tonumber(ARGV[at + 5])}
    next_key, at = next_key + 2, at + 6
  else
    return redis.error_reply('token_bucket.lua: unknown argument group ' .. ARGV[at])
  end
end

-- The tier's fair shares live in its bucket's hash (fair_share_keys), and so do its
-- recent admissions in the bucket's pool: then they are read with the level in one
-- HMGET and stored with it in one HSET.
local merged = fair ~= nil and n >= 1 and fair.state == KEYS[1]
local fair_read
local record_merged = record ~= nil and n >= 1 and record.key == KEYS[1]
local record_slot, record_field, record_read
if record ~= nil then
  record_slot = math.floor(now / record.slot)
  record_field = 'r|' .. record_slot
end

local levels = {}
local refused, longest_wait, over_share = 0, 0, 0

for i = 1, n do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  if cost > burst then
    return {0, i, -1, tostring(burst), 0, 0}
  end
  local tokens
  if i == 1 and (merged or record_merged) then
    local more = merged and {'#weights', '#served', '#at', '#swept', 't:' .. fair.tenant} or {}
    if record_merged then
      more[#more + 1], more[#more + 2] = record_field, '#r'
    end
    local extra
    tokens, extra = refilled(KEYS[i], rate, burst, more)
    fair_read = merged and extra or nil
    if record_merged then
      record_read = {extra[#more - 1], extra[#more]}
    end
  else
    tokens = refilled(KEYS[i], rate, burst)
  end
  levels[i] = tokens
  if tokens < cost then
    local wait = math.ceil((cost - tokens) * 1000 / rate)
    if wait > longest_wait then
      refused, longest_wait = i, wait
    end
  end
end

-- Fair shares (docs/fair-shares.md). Each tenant's entry in the state is
-- "served,refused,at (ms),weight": tokens served, and refused by the tier's bucket (it
-- wanted more than it got: waiting or shed), decayed over `window`;
-- '#weights' sums the active tenants' weights, '#served' (decayed, as of '#at') what
-- they were served. A tenant is active while it asked within `active_ms`. Cheap on the
-- common path (one HMGET, one HSET): every SWEEP_MS a sweep looks at the tenants whose
-- score in the sorted set (when they were first seen, or last swept) is older than
-- that; those that asked since get their last ask as score, the others (at most 100 a
-- sweep) leave the sums. The sweep renews the keys' expiry too.
local SWEEP_MS = 100
local entry, weights, total, mine_at, swept
local function decayed(value, since)
  return value * math.exp(-math.max(0, now - since) / fair.window)
end
local function parsed(value)
  local s, a, t, w = string.match(value, '([^,]+),([^,]+),([^,]+),([^,]+)')
  return tonumber(s), tonumber(a), tonumber(t), tonumber(w)
end
if fair ~= nil then
  local got = fair_read or redis.call('HMGET', fair.state, '#weights', '#served', '#at',
                                     '#swept', 't:' .. fair.tenant)
  weights = tonumber(got[1] or '0')
  total = decayed(tonumber(got[2] or '0'), tonumber(got[3] or now))
  local mine = got[5]
  swept = now - tonumber(got[4] or '0') >= SWEEP_MS
  if swept then
    local quiet = redis.call('ZRANGEBYSCORE', fair.active, '-inf', now - fair.active_ms,
                             'LIMIT', 0, 100)
    for _, name in ipairs(quiet) do
      local gone = name == fair.tenant and mine or redis.call('HGET', fair.state, 't:' .. name)
      local s, _, t, w
      if gone then
        s, _, t, w = parsed(gone)
      end
      if gone and t > now - fair.active_ms then
        redis.call('ZADD', fair.active, t, name)  -- asked since its score was last set
      else
        if gone then
          weights = weights - w
          total = total - decayed(s, t)
          redis.call('HDEL', fair.state, 't:' .. name)
        end
        redis.call('ZREM', fair.active, name)
        if name == fair.tenant then
          mine = false
        end
      end
    end
  end
  entry = {served = 0, refused = 0}
  if mine then
    local s, a, t, w = parsed(mine)
    entry.served, entry.refused, mine_at = decayed(s, t), decayed(a, t), t
    weights = weights - w  -- its weight may have changed: counted anew below
  end
  local others = math.max(0, weights)
  weights = others + fair.weight
  total = math.max(total, entry.served)
  -- Over its share: served more per unit of weight than the tier's active tenants were
  -- on average. Then it may not take the bucket below the reserve, kept for those under
  -- theirs; alone in the tier, it is owed no one. (A tenant under its weight's part of
  -- the rate of a contended tier, whose tenants are served the whole rate, is under the
  -- average; one that asks for less than its part is never over it.) Both sides count
  -- half of this request: admitted while under, each tenant's service then runs a
  -- sawtooth around its share itself, whatever its weight (counted whole or not at all,
  -- a light tenant would overshoot its share by more than a heavy one).
  local over = others > fair.weight * 1e-9
    and (entry.served + cost / 2) / fair.weight > (total + cost / 2) / weights
  if over and levels[1] - cost < fair.reserve then
    local rate = tonumber(ARGV[2])
    local wait = math.ceil((fair.reserve + cost - levels[1]) * 1000 / rate)
    if wait > longest_wait then
      refused, longest_wait, over_share = 1, wait, 1
    end
  end
end

-- What the fair shares keep of this call. Returns, when the fields are to be stored
-- with the tier's bucket (merged and admitted), them and until when the hash must live.
local function keep_fair(admitted)
  if fair == nil then
    return {}
  end
  local fields = {}
  if refused > 1 then  -- refused by its own budget: it does not contend for the tier's
    if mine_at == nil then
      weights = weights - fair.weight  -- not active: out of the sum again
    end
    if not swept then
      return {}  -- nothing changed
    end
  else
    if admitted then
      entry.served = entry.served + cost
      total = total + cost
    else
      entry.refused = entry.refused + cost
    end
    fields = {'t:' .. fair.tenant,
              string.format('%.17g,%.17g,%.17g,%.17g', entry.served, entry.refused, now,
                            fair.weight)}
    if mine_at == nil then  -- new: its score is kept up to date by the sweeps
      redis.call('ZADD', fair.active, now, fair.tenant)
    end
  end
  local kept = {'#weights', string.format('%.17g', math.max(0, weights)),
                '#served', string.format('%.17g', math.max(0, total)), '#at', tostring(now)}
  for _, value in ipairs(fields) do
    kept[#kept + 1] = value
  end
  -- Both live as long as each other: a tenant in the state is always in the set.
  local keep = math.ceil(fair.active_ms + fair.window + 2 * SWEEP_MS)
  if swept then
    kept[#kept + 1], kept[#kept + 2] = '#swept', tostring(now)
    redis.call('PEXPIRE', fair.active, keep)
  end
  if merged and admitted then
    return kept, keep
  end
  redis.call('HSET', fair.state, unpack(kept))
  -- The bucket's hash (merged) is only ever given a later expiry, never a sooner one;
  -- this runs once a sweep (100 ms) at most, so its PTTL costs next to nothing.
  if swept and (not merged or redis.call('PTTL', fair.state) < keep) then
    redis.call('PEXPIRE', fair.state, keep)
  end
  return {}
end

-- Recent admissions: per slot of `slot` ms, blocks * 2^20 + requests, so one number
-- counts both. In the tier's bucket (merged), field "r|<slot>", stored with the level;
-- '#r' is the last slot written, so when a slot starts the slots that ended more than
-- `keep` ago are dropped (those between '#r' and that: one field a slot, in steady
-- traffic), and the hash is kept that long at least. In a hash of its own, field
-- "<slot>|p|<pool>", one HINCRBY; its expiry is pushed out when a slot starts, and its
-- readers drop the old slots (read_admitted.lua).
local PACKED = 1048576  -- 2^20: requests in one slot stay below it
local added = record and record.blocks * PACKED + 1  -- this admission, packed
local function wants_record()
  return record ~= nil and (refused == 0 or record.even_refused)
end
-- The merged record's fields to store with the bucket (the old slots dropped first).
local function record_fields()
  local fields = {record_field, string.format('%d', tonumber(record_read[1] or '0') + added)}
  if not record_read[1] then  -- the slot starts here
    local last = tonumber(record_read[2] or '')
    if last ~= nil then
      local span = math.ceil(record.keep / record.slot)
      local old = {}
      for s = math.max(last - span + 1, 0), math.min(last, record_slot - span) do
        old[#old + 1] = 'r|' .. s
      end
      if #old > 0 then
        redis.call('HDEL', KEYS[1], unpack(old))
      end
    end
    fields[3], fields[4] = '#r', tostring(math.max(last or 0, record_slot))
  end
  return fields
end
local function recorded_apart()
  local field = record_slot .. '|p|' .. record.pool
  if redis.call('HINCRBY', record.key, field, string.format('%d', added)) == added then
    redis.call('PEXPIRE', record.key, record.keep)
  end
end

local recorded_ms = wants_record() and math.floor(now) or 0

if refused > 0 then
  keep_fair(false)
  if recorded_ms > 0 and record_merged then  -- the level is not stored: the record alone
    redis.call('HSET', KEYS[1], unpack(record_fields()))
    if redis.call('PTTL', KEYS[1]) < record.keep then
      redis.call('PEXPIRE', KEYS[1], record.keep)
    end
  elseif recorded_ms > 0 then
    recorded_apart()
  end
  return {0, refused, longest_wait, tostring(levels[1]), recorded_ms, over_share}
end

local fair_kept, fair_keep = keep_fair(true)
local first_more, first_keep = fair_kept, fair_keep
if record_merged then
  for _, value in ipairs(record_fields()) do
    first_more[#first_more + 1] = value
  end
  first_keep = math.max(first_keep or 0, record.keep)
elseif recorded_ms > 0 then
  recorded_apart()
end
for i = 1, n do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  if i == 1 then
    store(KEYS[i], levels[i] - cost, rate, burst, first_more, first_keep)
  else
    store(KEYS[i], levels[i] - cost, rate, burst)
  end
end
return {1, 0, 0, tostring(levels[1] - cost), recorded_ms, 0}
