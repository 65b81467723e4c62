-- A request ends: its slot goes straight to the next waiter (nothing else to do when nobody waits: expired
-- leases are reclaimed by the next acquire that finds no slot, and by every gateway's renewal tick).
-- KEYS: leases, queue, waiters, clock, alive
-- ARGV: ticket, capacity, pickup_ms, wake_prefix
-- Returns {removed (0 when the lease had expired), granted}.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[2]) == 0 then
  return {removed, 0}
end
local granted = pump(
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[4], tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms()
)
return {removed, granted}
