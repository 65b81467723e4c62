-- A waiter gives up (client gone, or its wait ran out).
-- KEYS: leases, queue, waiters, clock, gone, wake
-- ARGV: ticket, keep, capacity, ttl_ms, wake_prefix
-- Returns 0 left the queue, 1 kept a slot granted meanwhile (keep = 1),
-- 2 passed a slot granted meanwhile on to the next waiter, 3 unknown ticket (a tombstone is left).
local leases, queue, waiters, clock, gone, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ticket, keep = ARGV[1], ARGV[2]
local capacity, ttl_ms, wake_prefix = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]

local entry = redis.call('HGET', waiters, ticket)
redis.call('DEL', wake)
if entry then
  redis.call('ZREM', queue, string.match(entry, '^%d+ (.*)$'))
  redis.call('HDEL', waiters, ticket)
  return 0
end
if redis.call('ZSCORE', leases, ticket) then
  if keep == '1' then
    return 1
  end
  redis.call('ZREM', leases, ticket)
  pump(leases, queue, waiters, clock, wake_prefix, capacity, ttl_ms, now_ms())
  return 2
end
redis.call('SET', gone, '1', 'PX', 60000)
return 3
