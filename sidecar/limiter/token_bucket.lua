-- Take `cost` tokens from every bucket in KEYS, all or nothing, atomically; and record
-- the admission for the pools' projected load (overload/admitted.py) in the same call.
--
-- KEYS[i], i <= n   a bucket (hash: tokens, ts); all keys share one hash tag (one slot)
-- KEYS[n + 1]       optional: the tier's record of recent admissions (hash)
-- ARGV[1]           cost, in tokens
-- ARGV[2i], ARGV[2i+1]   rate (tokens/s) and burst (tokens) of KEYS[i]
-- with a record, then: KV blocks, pool, slot (ms), keep (ms), record even if refused (1|0)
--
-- Buckets are refilled and stored as bucket_level.lua (loaded before this) does: on
-- Redis's own clock, a missing key a full bucket.
--
-- Returns {allowed (1|0), refused bucket index (0 if none), retry after (ms, -1 if
-- never: cost above that bucket's burst), tokens left in bucket 1 (string), when the
-- admission was recorded (Redis time, ms; 0: not recorded)}.

local cost = tonumber(ARGV[1])
local n = #KEYS
if #ARGV > 2 * n + 1 then
  n = n - 1
end
local levels = {}
local refused, longest_wait = 0, 0

for i = 1, n do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  if cost > burst then
    return {0, i, -1, tostring(burst), 0}
  end
  local tokens = refilled(KEYS[i], rate, burst)
  levels[i] = tokens
  if tokens < cost then
    local wait = math.ceil((cost - tokens) * 1000 / rate)
    if wait > longest_wait then
      refused, longest_wait = i, wait
    end
  end
end

-- Recent admissions: per slot of `slot` ms and pool, fields "<slot>|b|<pool>" (blocks)
-- and "<slot>|n|<pool>" (requests); readers drop the old ones (read_admitted.lua).
local function record()
  if n == #KEYS or (refused > 0 and ARGV[2 * n + 6] ~= '1') then
    return 0
  end
  local base = 2 * n + 1
  local key, pool = KEYS[n + 1], ARGV[base + 2]
  local slot = math.floor(now / tonumber(ARGV[base + 3]))
  redis.call('HINCRBY', key, slot .. '|b|' .. pool, tonumber(ARGV[base + 1]))
  redis.call('HINCRBY', key, slot .. '|n|' .. pool, 1)
  redis.call('PEXPIRE', key, tonumber(ARGV[base + 4]))
  return math.floor(now)
end

if refused > 0 then
  return {0, refused, longest_wait, tostring(levels[1]), record()}
end

for i = 1, n do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  store(KEYS[i], levels[i] - cost, rate, burst)
end
return {1, 0, 0, tostring(levels[1] - cost), record()}
