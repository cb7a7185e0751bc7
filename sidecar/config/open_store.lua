-- The store's identity, making an empty store a new one (config/store.py).
-- KEYS: the store's identity, the document, the version
-- ARGV: a new identity, the default document
-- -> {identity, version after it (0 when no document was written)}
local store = redis.call('GET', KEYS[1])
if store then
  return {store, 0}
end
redis.call('SET', KEYS[1], ARGV[1])
if redis.call('SET', KEYS[2], ARGV[2], 'NX') then
  return {ARGV[1], redis.call('INCR', KEYS[3])}
end
return {ARGV[1], 0}
