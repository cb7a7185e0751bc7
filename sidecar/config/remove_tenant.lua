-- A tenant's record and the keys it holds, nothing another tenant holds.
-- KEYS: tenants hash, api-keys hash, the tenant's key set, version, the store's identity,
--       the record of changes
-- ARGV: name, the identity of the store written to, the tenant's record read before
--       ('' for none), the change's record, records kept
-- -> {1 if it existed else 0, version} | {'lost'} (Redis no longer holds that store)
--    | {'retry'} (the tenant changed meanwhile: its record would lie)
local name = ARGV[1]
if redis.call('GET', KEYS[5]) ~= ARGV[2] then
  return {'lost'}
end
if (redis.call('HGET', KEYS[1], name) or '') ~= ARGV[3] then
  return {'retry'}
end
local existed = redis.call('HDEL', KEYS[1], name)
for _, digest in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if redis.call('HGET', KEYS[2], digest) == name then
    redis.call('HDEL', KEYS[2], digest)
  end
end
redis.call('DEL', KEYS[3])
if existed == 1 then
  redis.call('LPUSH', KEYS[6], ARGV[4])
  redis.call('LTRIM', KEYS[6], 0, tonumber(ARGV[5]) - 1)
end
return {existed, redis.call('INCR', KEYS[4])}
