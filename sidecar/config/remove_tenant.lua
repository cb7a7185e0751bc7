-- A tenant's record and the keys it holds, nothing another tenant holds.
-- KEYS: tenants hash, api-keys hash, the tenant's key set, version, the store's identity
-- ARGV: name, the identity of the store written to
-- -> {1 if it existed else 0, version} | {'lost'} (Redis no longer holds that store)
local name = ARGV[1]
if redis.call('GET', KEYS[5]) ~= ARGV[2] then
  return {'lost'}
end
local existed = redis.call('HDEL', KEYS[1], name)
for _, digest in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if redis.call('HGET', KEYS[2], digest) == name then
    redis.call('HDEL', KEYS[2], digest)
  end
end
redis.call('DEL', KEYS[3])
return {existed, redis.call('INCR', KEYS[4])}
