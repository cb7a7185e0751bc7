-- The tenants a file declares, written whole (config/declared.py): each tenant's record
-- and exactly its declared keys (a key another tenant holds moves to it; a key it holds
-- and the file no longer names is revoked); the tenants the same file declared before and
-- no longer does, removed with their keys; the others left as they are.
-- KEYS: the store's identity, tenants hash, api-keys hash, version, the declared tenants
--       (hash: name -> the file that declares it), the record of changes
-- ARGV: the identity of the store written to, the file's path, the key sets' prefix,
--       {name: {"record": JSON, "digests": [hex]}} JSON, the change's record, records kept
-- -> {'ok', version} | {'lost'} (Redis no longer holds that store)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'lost'}
end
local path, prefix = ARGV[2], ARGV[3]
local declared = cjson.decode(ARGV[4])

local function revoke(name, keep)
  local set = prefix .. name
  for _, digest in ipairs(redis.call('SMEMBERS', set)) do
    if not keep[digest] then
      if redis.call('HGET', KEYS[3], digest) == name then
        redis.call('HDEL', KEYS[3], digest)
      end
      redis.call('SREM', set, digest)
    end
  end
end

local owners = redis.call('HGETALL', KEYS[5])
for i = 1, #owners, 2 do
  local name, owner = owners[i], owners[i + 1]
  if owner == path and declared[name] == nil then
    redis.call('HDEL', KEYS[2], name)
    revoke(name, {})
    redis.call('HDEL', KEYS[5], name)
  end
end
for name, tenant in pairs(declared) do
  redis.call('HSET', KEYS[2], name, tenant.record)
  local keep = {}
  for _, digest in ipairs(tenant.digests) do
    keep[digest] = true
    local holder = redis.call('HGET', KEYS[3], digest)
    if holder and holder ~= name then
      redis.call('SREM', prefix .. holder, digest)
    end
    redis.call('HSET', KEYS[3], digest, name)
    redis.call('SADD', prefix .. name, digest)
  end
  revoke(name, keep)
  redis.call('HSET', KEYS[5], name, path)
end
redis.call('LPUSH', KEYS[6], ARGV[5])
redis.call('LTRIM', KEYS[6], 0, tonumber(ARGV[6]) - 1)
return {'ok', redis.call('INCR', KEYS[4])}
