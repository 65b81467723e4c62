-- A request ends: its slot goes straight to the next waiter.
-- KEYS: leases, queue, waiters, clock, alive
-- ARGV: ticket, capacity, pickup_ms, wake_prefix
-- Returns {removed (0 when the lease had expired), granted}.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
local granted = pump(
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[4], tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms()
)
return {removed, granted}
