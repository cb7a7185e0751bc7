-- Take or keep a lease: one holder at a time, gone when its holder stops renewing.
-- KEYS[1] the lease; ARGV[1] my id; ARGV[2] lease in ms. Returns the holder's id.
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return ARGV[1]
end
return holder
