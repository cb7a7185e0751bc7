-- Put back a configuration the store lost (config/recovery.py), only while it is still lost
-- as the sidecar that holds it sees it: the first sidecar writes, the others find it back.
-- Lost: no document or identity, behind the held version, a newer identity; or, when
-- the sidecar found parts lost or changed behind the held version (recovery.py), the held
-- version with the checksum record as the sidecar found it (no other put back since).
-- KEYS: identity, document, last good document, mode, shares, tenants, API keys, version,
--       the declared document's file, the declared tenants' files, the record of
--       changes, the controller's moves, the recorded checksum, then the key set of
--       each tenant, in the order ARGV[8] names them
-- ARGV: held identity, held version, document, mode, shares ('' for none),
--       tenants {name: record JSON} JSON, API keys {digest: name} JSON, [names] JSON,
--       the document's file ('' for none), {name: file} JSON, [record] JSON and
--       [move] JSON (newest first), the put back's own record, records kept, the
--       checksum of what it writes, the checksum record as the sidecar found it ('':
--       none), '1' when it found a part lost (else the store lost as a whole), a nonce
--       for its own record
-- -> 1 written, 0 not lost (any more)
local held, held_version = ARGV[1], tonumber(ARGV[2])
local store = redis.call('GET', KEYS[1])
local version = tonumber(redis.call('GET', KEYS[8]) or '0')
local lost = redis.call('EXISTS', KEYS[2]) == 0 or not store
  or (store == held and version < held_version) or (store ~= held and store > held)
if not lost and ARGV[17] == '1' and store == held and version == held_version then
  lost = (redis.call('GET', KEYS[13]) or '') == ARGV[16]
end
if not lost then
  return 0
end
redis.call('SET', KEYS[1], held)
redis.call('SET', KEYS[2], ARGV[3])
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], ARGV[4])
if ARGV[5] == '' then
  redis.call('DEL', KEYS[5])
else
  redis.call('SET', KEYS[5], ARGV[5])
end
redis.call('DEL', KEYS[6], KEYS[7], KEYS[10])
if ARGV[9] == '' then
  redis.call('DEL', KEYS[9])
else
  redis.call('SET', KEYS[9], ARGV[9])
end
for name, file in pairs(cjson.decode(ARGV[10])) do
  redis.call('HSET', KEYS[10], name, file)
end
for name, record in pairs(cjson.decode(ARGV[6])) do
  redis.call('HSET', KEYS[6], name, record)
end
local key_set = {}
for i, name in ipairs(cjson.decode(ARGV[8])) do
  key_set[name] = KEYS[13 + i]
  redis.call('DEL', KEYS[13 + i])
end
for digest, name in pairs(cjson.decode(ARGV[7])) do
  redis.call('HSET', KEYS[7], digest, name)
  if key_set[name] then
    redis.call('SADD', key_set[name], digest)
  end
end
redis.call('DEL', KEYS[11], KEYS[12])
for _, entry in ipairs(cjson.decode(ARGV[11])) do
  redis.call('RPUSH', KEYS[11], entry)
end
for _, move in ipairs(cjson.decode(ARGV[12])) do
  redis.call('RPUSH', KEYS[12], move)
end
redis.call('LPUSH', KEYS[11], ARGV[13])
redis.call('LTRIM', KEYS[11], 0, tonumber(ARGV[14]) - 1)
redis.call('SET', KEYS[8], held_version)
redis.call('SET', KEYS[13], ARGV[2] .. ':' .. ARGV[15] .. ':' .. ARGV[18])
return 1
