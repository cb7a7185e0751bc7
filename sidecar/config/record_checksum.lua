-- Record the checksum a sidecar holds for its version (config/recovery.py), while the store
-- is at that version and records otherwise. A record is "<version>:<checksum>:<nonce>":
-- the nonce tells one put back's record from another's of the same state.
-- KEYS: the version, the recorded checksum
-- ARGV: the version held, its checksum, a nonce
-- -> 1 recorded, 0 not (another version, or recorded already)
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local prefix = ARGV[1] .. ':' .. ARGV[2] .. ':'
local recorded = redis.call('GET', KEYS[2]) or ''
if string.sub(recorded, 1, #prefix) == prefix then
  return 0
end
redis.call('SET', KEYS[2], prefix .. ARGV[3])
return 1
