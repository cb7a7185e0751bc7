-- A tenant's record and its API key, together (sidecar/config/tenants.py).
-- KEYS: tenants hash, api-keys hash, the tenant's key set, version, the store's identity,
--       the set of the key's holder as read before the call (the tenant's own when none),
--       the record of changes
-- ARGV: name, tenant JSON, key digest ('' for none), holder read before ('' for none),
--       '1' to move the key from its holder, the identity of the store written to,
--       the tenant's record read before ('' for none), the change's record, records kept
-- -> {'ok', version} | {'held', holder} | {'lost'} (Redis no longer holds that store)
--    | {'retry'} (the holder or the tenant changed meanwhile: its record would lie)
local name, digest, expected = ARGV[1], ARGV[3], ARGV[4]
if redis.call('GET', KEYS[5]) ~= ARGV[6] then
  return {'lost'}
end
if (redis.call('HGET', KEYS[1], name) or '') ~= ARGV[7] then
  return {'retry'}
end
local holder = false
if digest ~= '' then
  holder = redis.call('HGET', KEYS[2], digest)
end
if (holder or '') ~= expected then
  return {'retry'}
end
if holder and holder ~= name and ARGV[5] ~= '1' then
  return {'held', holder}
end
redis.call('HSET', KEYS[1], name, ARGV[2])
if digest ~= '' then
  if holder and holder ~= name then
    redis.call('SREM', KEYS[6], digest)
  end
  redis.call('HSET', KEYS[2], digest, name)
  redis.call('SADD', KEYS[3], digest)
end
redis.call('LPUSH', KEYS[7], ARGV[8])
redis.call('LTRIM', KEYS[7], 0, tonumber(ARGV[9]) - 1)
return {'ok', redis.call('INCR', KEYS[4])}
