-- A waiter woken by a grant takes it: the lease's short pick-up expiry becomes the full lease TTL.
-- KEYS: leases
-- ARGV: ticket, ttl_ms
-- Returns 1 claimed, 0 the grant was reclaimed (not picked up in time): queue again.
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], 'XX', now_ms() + tonumber(ARGV[2]), ARGV[1])
  return 1
end
return 0
