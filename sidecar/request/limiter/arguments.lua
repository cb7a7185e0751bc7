-- The one argument protocol of token_bucket.lua and settle.lua.
--
-- ARGV[1]        tokens (to take; to settle, to give back: negative, a debt)
-- ARGV[3i-1], ARGV[3i], ARGV[3i+1]   rate (tokens/s), burst and most debt (tokens) of
--                KEYS[i], a bucket; all keys share one hash tag (one slot)
-- then optional groups, each named by its first argument, each with the next KEYS:
--   'record', KV blocks, pool, slot (ms), keep (ms), record even if refused (1|0)
--        no KEYS: recorded in KEYS[1], the tier's bucket in the admission's pool
--   'count', admissions: how many the record counts (1 when not given), `blocks` their sum
--   'fair', tenant, weight, window (ms), active (ms), reserve (tokens)
--        KEYS: the tier's fair-share state (hash), its active tenants (sorted set)
--   'else', beyond (ms), then a whole second set of arguments as above (its own tokens,
--        buckets and groups), with the KEYS that follow: token_bucket.lua takes from it
--        instead when the first set's tier bucket refuses for longer than `beyond`
--        (another pool's budgets, for a request its own pool's would shed). Last.
--
-- Read from KEYS[key_at] and ARGV[arg_at] on (1 and 1 for the first set). Returns the
-- tokens, the buckets ({key, rate, burst, debt} each) and the groups by name, or nil
-- and why not.

local function arguments(key_at, arg_at)
  local buckets, at = {}, arg_at + 1
  while ARGV[at] ~= nil and tonumber(ARGV[at]) ~= nil do
    buckets[#buckets + 1] = {key = KEYS[key_at + #buckets], rate = tonumber(ARGV[at]),
                             burst = tonumber(ARGV[at + 1]), debt = tonumber(ARGV[at + 2])}
    at = at + 3
  end
  local next_key, groups = key_at + #buckets, {}
  while ARGV[at] ~= nil do
    if ARGV[at] == 'record' then
      groups.record = {blocks = tonumber(ARGV[at + 1]), pool = ARGV[at + 2],
                       slot = tonumber(ARGV[at + 3]), keep = tonumber(ARGV[at + 4]),
                       even_refused = ARGV[at + 5] == '1'}
      at = at + 6
    elseif ARGV[at] == 'count' then
      groups.count = tonumber(ARGV[at + 1])
      at = at + 2
    elseif ARGV[at] == 'fair' then
      groups.fair = {state = KEYS[next_key], active = KEYS[next_key + 1],
                     tenant = ARGV[at + 1], weight = tonumber(ARGV[at + 2]),
                     window = tonumber(ARGV[at + 3]), active_ms = tonumber(ARGV[at + 4]),
                     reserve = tonumber(ARGV[at + 5])}
      next_key, at = next_key + 2, at + 6
    elseif ARGV[at] == 'else' then
      groups.otherwise = {beyond = tonumber(ARGV[at + 1]), key_at = next_key, arg_at = at + 2}
      break
    else
      return nil, nil, nil, 'unknown argument group ' .. tostring(ARGV[at])
    end
  end
  return tonumber(ARGV[arg_at]), buckets, groups
end
