-- KEYS: leases, queue, waiters, clock, seq, gone
-- ARGV: ticket, capacity, ttl_ms, tenant, priority, cost, max_queue, max_wait_ms, wake_prefix
-- Returns {status, depth}: 1 granted, 0 queued, -1 queue full, -2 ticket already cancelled.
-- Idempotent for one ticket, so a retried call after a lost reply does no harm.
local leases, queue, waiters, clock, seq, gone = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local ticket = ARGV[1]
local capacity, ttl_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local tenant, priority, cost = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local max_queue, max_wait_ms, wake_prefix = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]

if redis.call('EXISTS', gone) == 1 then
  return {-2, 0}
end
if redis.call('ZSCORE', leases, ticket) then
  return {1, 0}
end
if redis.call('HEXISTS', waiters, ticket) == 1 then
  return {0, redis.call('ZCARD', queue)}
end

local now = now_ms()
pump(leases, queue, waiters, clock, wake_prefix, capacity, ttl_ms, now)
local depth = redis.call('ZCARD', queue)
if depth == 0 and redis.call('ZCARD', leases) < capacity then
  redis.call('ZADD', leases, now + ttl_ms, ticket)
  return {1, 0}
end
if depth >= max_queue then
  return {-1, depth}
end

-- start-time fair queueing: start = max(V, F[tenant]); F[tenant] = start + cost
local virtual = tonumber(redis.call('HGET', clock, '_v') or '0')
local finish = tonumber(redis.call('HGET', clock, 't:' .. tenant) or '0')
local start = math.max(virtual, finish)
redis.call('HSET', clock, 't:' .. tenant, string.format('%d', start + math.max(1, cost)))
local n = redis.call('INCR', seq)
local member = string.format('%04d%015d%015d', 9999 - priority, start, n) .. ticket
redis.call('ZADD', queue, 0, member)
redis.call('HSET', waiters, ticket, string.format('%d', now + max_wait_ms) .. ' ' .. member)
return {0, depth + 1}
