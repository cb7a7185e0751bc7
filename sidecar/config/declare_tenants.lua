-- The tenants a file declares, written as a change to the version the sidecar planned it
-- against (config/declared.py): only what differs, so a file of thousands of tenants
-- holds Redis for what changed, not for all of them. Each tenant gets its record and
-- exactly its declared keys (a key another tenant holds moves to it; a key it holds and
-- the file no longer names is revoked); the tenants the same file declared before and no
-- longer does are removed with their keys; the others are left as they are.
-- KEYS: the store's identity, tenants hash, api-keys hash, version, the declared tenants
--       (hash: name -> the file that declares it), the record of changes
-- ARGV: the identity of the store written to, the version planned against, the key
--       sets' prefix, the change as JSON {"records": {name: record JSON}, "keys": {name:
--       [hex]}, "owned": {name: the file's path}, "removed": [name]}, the change's record,
--       records kept
-- -> {'ok', version} | {'lost'} (Redis no longer holds that store) | {'moved'} (the
--    store changed since the plan: plan again)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {'lost'}
end
if (redis.call('GET', KEYS[4]) or '0') ~= ARGV[2] then
  return {'moved'}
end
local prefix = ARGV[3]
local change = cjson.decode(ARGV[4])
local CHUNK = 500  -- fields a call: Lua's stack takes a few thousand arguments at most

local function set_fields(key, values)
  local flat = {}
  for field, value in pairs(values) do
    flat[#flat + 1] = field
    flat[#flat + 1] = value
  end
  for first = 1, #flat, 2 * CHUNK do
    redis.call('HSET', key, unpack(flat, first, math.min(first + 2 * CHUNK - 1, #flat)))
  end
end

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

for _, name in ipairs(change.removed) do
  redis.call('HDEL', KEYS[2], name)
  revoke(name, {})
  redis.call('HDEL', KEYS[5], name)
end
set_fields(KEYS[2], change.records)
for name, digests in pairs(change.keys) do
  local keep = {}
  for _, digest in ipairs(digests) do
    keep[digest] = true
    local holder = redis.call('HGET', KEYS[3], digest)
    if holder and holder ~= name then
      redis.call('SREM', prefix .. holder, digest)
    end
    redis.call('HSET', KEYS[3], digest, name)
    redis.call('SADD', prefix .. name, digest)
  end
  revoke(name, keep)
end
set_fields(KEYS[5], change.owned)
redis.call('LPUSH', KEYS[6], ARGV[5])
redis.call('LTRIM', KEYS[6], 0, tonumber(ARGV[6]) - 1)
return {'ok', redis.call('INCR', KEYS[4])}
