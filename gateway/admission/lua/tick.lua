-- One gateway's periodic step for one model: renew its leases, reclaim expired ones, grant free slots.
-- KEYS: leases, queue, waiters, clock, alive
-- ARGV: capacity, ttl_ms, wake_prefix, pickup_ms, lease ids held by this gateway...
-- Returns {queue depth, active leases, lease ids that were no longer in Redis...}.
-- Renewal never re-creates a lease (XX): a lease released meanwhile must stay released.
local leases = KEYS[1]
local capacity, ttl_ms, pickup_ms = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
local now = now_ms()
local missing = {}
for i = 5, #ARGV do
  if redis.call('ZSCORE', leases, ARGV[i]) then
    redis.call('ZADD', leases, 'XX', now + ttl_ms, ARGV[i])
  else
    missing[#missing + 1] = ARGV[i]
  end
end
pump(leases, KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], capacity, pickup_ms, now)
local out = {redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', leases)}
for _, id in ipairs(missing) do
  out[#out + 1] = id
end
return out
