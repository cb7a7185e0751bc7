-- A tenant's record and the keys it holds, nothing another tenant holds.
-- KEYS: tenants hash, api-keys hash, the tenant's key set, version
-- ARGV: name
-- -> {1 if it existed else 0, version}
local name = ARGV[1]
local existed = redis.call('HDEL', KEYS[1], name)
for _, digest in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if redis.call('HGET', KEYS[2], digest) == name then
    redis.call('HDEL', KEYS[2], digest)
  end
end
redis.call('DEL', KEYS[3])
return {existed, redis.call('INCR', KEYS[4])}
