-- Shared by every admission script (prepended when the script is loaded).
-- Per model, under one hash tag:
--   leases  ZSET  member = lease id (= ticket id), score = expiry in ms (Redis clock)
--   queue   ZSET  all scores 0; member = 4-digit inverted priority .. 15-digit SFQ start tag ..
--                 15-digit arrival sequence .. ticket id, so byte order is grant order
--   waiters HASH  ticket id -> "<deadline ms> <queue member>"
--   clock   HASH  "_v" -> SFQ virtual time; "t:<tenant>" -> the tenant's finish tag
--   wake:<ticket> LIST  one element pushed when the ticket is granted (its owner BLPOPs it)

local PREFIX_LEN = 34

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drop expired leases, then grant free slots to the head of the queue (the hand-over).
local function pump(leases, queue, waiters, clock, wake_prefix, capacity, ttl_ms, now)
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  local active = redis.call('ZCARD', leases)
  local granted = 0
  while active < capacity do
    local head = redis.call('ZPOPMIN', queue)
    if #head == 0 then
      break
    end
    local member = head[1]
    local ticket = string.sub(member, PREFIX_LEN + 1)
    local entry = redis.call('HGET', waiters, ticket)
    redis.call('HDEL', waiters, ticket)
    -- a waiter past its deadline (its gateway gave up or died) is skipped
    if entry and tonumber(string.match(entry, '^(%d+) ')) >= now then
      redis.call('ZADD', leases, now + ttl_ms, ticket)
      local wake = wake_prefix .. ticket
      redis.call('RPUSH', wake, '1')
      redis.call('PEXPIRE', wake, ttl_ms)
      local start = tonumber(string.sub(member, 5, 19))
      if start > tonumber(redis.call('HGET', clock, '_v') or '0') then
        redis.call('HSET', clock, '_v', string.format('%d', start))
      end
      active = active + 1
      granted = granted + 1
    end
  end
  return granted
end
