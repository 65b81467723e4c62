-- KEYS: leases, queue, waiters, clock, alive, seq, gone
-- ARGV: ticket, capacity, ttl_ms, tenant, priority, cost, max_queue, max_wait_ms, wake_prefix, pickup_ms,
--       presence_ms, requeued (the cost its first queueing charged when its grant was reclaimed before it
--       picked it up, else 0)
-- Returns {status, depth}: 1 granted, 0 queued, -1 queue full, -2 ticket already cancelled.
-- Idempotent for one ticket, so a retried call after a lost reply does no harm. The ticket's gateway is
-- stamped present for presence_ms if its stamp is missing or lapsed. A ticket queued again after its grant
-- was reclaimed first gives its tenant's tag back what its first queueing charged: one request, one charge.
local leases, queue, waiters, clock, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local seq, gone = KEYS[6], KEYS[7]
local ticket = ARGV[1]
local capacity, ttl_ms = tonumber(ARGV[2]), tonumber(ARGV[3])
local tenant, priority, cost = ARGV[4], tonumber(ARGV[5]), math.max(1, tonumber(ARGV[6]))
local max_queue, max_wait_ms, wake_prefix = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9]
local pickup_ms, presence_ms, requeued = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12] or '0')

if redis.call('EXISTS', gone) == 1 then
  return {-2, 0}
end

-- Once only: not when this call is a retry that finds the ticket queued or leased already.
if requeued > 0 and not redis.call('ZSCORE', leases, ticket) and redis.call('HEXISTS', waiters, ticket) == 0 then
  refund(clock, tenant, requeued)
end

-- The ticket's gateway stamped present if it is not (its renewing thread and its beat keep it so): a
-- read, and a write only for a gateway's first acquire of a model or after its stamp lapsed.
local now = now_ms()
local owner = owner_of(ticket)
if owner and tonumber(redis.call('HGET', alive, owner) or '0') < now then
  redis.call('HSET', alive, owner, now + presence_ms)
end

-- Fast path: nobody queued and a slot free (expired leases only matter when none is): grant at once.
-- NX: a retried call whose first one granted keeps its lease as it is.
local depth = redis.call('ZCARD', queue)
if depth == 0 and redis.call('ZCARD', leases) < capacity then
  redis.call('ZADD', leases, 'NX', now + ttl_ms, ticket)
  return {1, 0}
end

if redis.call('ZSCORE', leases, ticket) then
  return {1, 0}
end
if redis.call('HEXISTS', waiters, ticket) == 1 then
  return {0, depth}
end

pump(leases, queue, waiters, clock, alive, wake_prefix, capacity, pickup_ms, now)
depth = redis.call('ZCARD', queue)
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
redis.call('HSET', clock, 't:' .. tenant, string.format('%d', start + cost))
local n = redis.call('INCR', seq)
local member = string.format('%04d%015d%015d', 9999 - priority, start, n) .. ticket
redis.call('ZADD', queue, 0, member)
redis.call('HSET', waiters, ticket, waiter_entry(now + max_wait_ms, cost, member, tenant))
return {0, depth + 1}
