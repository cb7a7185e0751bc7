-- The tiers' compliance counts over their sample windows, fresh by Redis's clock, in
-- one call: counted here rather than each sample sent to every sidecar every tick (a busy
-- window is thousands of entries a tick to parse). It counts as samples.compliance does.
-- (A script rather than a pipeline with TIME: Redis Cluster clients refuse TIME in a
-- pipeline.)
-- KEYS[i] the list of tier i's samples, newest first, each "stamp_ms met value_ms kind"
-- ARGV[1] how many samples of each to look at; ARGV[2] the oldest a fresh one is (ms)
-- Returns {fresh, met} per key.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window, max_age = tonumber(ARGV[1]), tonumber(ARGV[2])
local MET = string.byte('1')
local reply = {}
for i = 1, #KEYS do
  local fresh, met = 0, 0
  for _, entry in ipairs(redis.call('LRANGE', KEYS[i], 0, window - 1)) do
    local space = string.find(entry, ' ', 1, true)
    local stamp = space and tonumber(string.sub(entry, 1, space - 1))
    if stamp and now - stamp <= max_age then
      fresh = fresh + 1
      if string.byte(entry, space + 1) == MET then
        met = met + 1
      end
    end
  end
  reply[i] = {fresh, met}
end
return reply
