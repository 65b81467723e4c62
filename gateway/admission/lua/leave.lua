-- A waiter gives up (client gone, or its wait ran out): it leaves the queue and its tenant's fair-share
-- tag gets back what queueing it charged.
-- KEYS: leases, queue, waiters, clock, alive, gone, wake
-- ARGV: ticket, keep, capacity, ttl_ms, wake_prefix, pickup_ms
-- Returns 0 left the queue, 1 kept a slot granted meanwhile (keep = 1),
-- 2 passed a slot granted meanwhile on to the next waiter, 3 unknown ticket (a tombstone is left).
local leases, queue, waiters, clock, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local gone, wake = KEYS[6], KEYS[7]
local ticket, keep = ARGV[1], ARGV[2]
local capacity, ttl_ms, wake_prefix = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local pickup_ms = tonumber(ARGV[6])

local entry = redis.call('HGET', waiters, ticket)
redis.call('DEL', wake)
if entry then
  drop_waiter(queue, waiters, clock, ticket, entry)
  return 0
end
if redis.call('ZSCORE', leases, ticket) then
  if keep == '1' then
    return 1
  end
  redis.call('ZREM', leases, ticket)
  pump(leases, queue, waiters, clock, alive, wake_prefix, capacity, pickup_ms, now_ms())
  return 2
end
redis.call('SET', gone, '1', 'PX', 60000)
return 3
