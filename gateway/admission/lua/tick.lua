-- One gateway's periodic step for one model: renew its leases, reclaim expired ones, grant free slots.
-- KEYS: leases, queue, waiters, clock
-- ARGV: capacity, ttl_ms, wake_prefix, lease ids held by this gateway...
-- Returns {queue depth, active leases, lease ids that were no longer in Redis...}.
-- Renewal never re-creates a lease (XX): a lease released meanwhile must stay released.
local leases = KEYS[1]
local capacity, ttl_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = now_ms()
local missing = {}
for i = 4, #ARGV do
  if redis.call('ZSCORE', leases, ARGV[i]) then
    redis.call('ZADD', leases, 'XX', now + ttl_ms, ARGV[i])
  else
    missing[#missing + 1] = ARGV[i]
  end
end
pump(leases, KEYS[2], KEYS[3], KEYS[4], ARGV[3], capacity, ttl_ms, now)
local out = {redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', leases)}
for _, id in ipairs(missing) do
  out[#out + 1] = id
end
return out
