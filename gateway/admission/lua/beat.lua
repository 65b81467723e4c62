-- One gateway instance's presence beat for one model: stamp itself present, drop what absent instances left behind
-- (their leases and their waiters, refunded), then grant what that freed.
-- KEYS: leases, queue, waiters, clock, alive
-- ARGV: instance (a gateway process), presence_ms, capacity, pickup_ms, wake_prefix
-- Returns {queue depth, active leases, leases and waiters dropped}.
local leases, queue, waiters, clock, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local capacity, pickup_ms, wake_prefix = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local now = now_ms()
redis.call('HSET', alive, ARGV[1], now + tonumber(ARGV[2]))
local stamps = redis.call('HGETALL', alive)
local dead, any = {}, false
for i = 1, #stamps, 2 do
  if tonumber(stamps[i + 1]) < now then
    dead[stamps[i]] = true
    any = true
    redis.call('HDEL', alive, stamps[i])
  end
end
local dropped = 0
if any then
  for _, ticket in ipairs(redis.call('ZRANGE', leases, 0, -1)) do
    local owner = owner_of(ticket)
    if owner and dead[owner] then
      redis.call('ZREM', leases, ticket)
      dropped = dropped + 1
    end
  end
  local entries = redis.call('HGETALL', waiters)
  for i = 1, #entries, 2 do
    local owner = owner_of(entries[i])
    if owner and dead[owner] then
      drop_waiter(queue, waiters, clock, entries[i], entries[i + 1])
      dropped = dropped + 1
    end
  end
end
pump(leases, queue, waiters, clock, alive, wake_prefix, capacity, pickup_ms, now)
return {redis.call('ZCARD', queue), redis.call('ZCARD', leases), dropped}
