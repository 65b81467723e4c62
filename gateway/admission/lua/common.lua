-- Shared by every admission script (prepended when the script is loaded).
-- Per model, under one hash tag (so every script touches one Redis Cluster slot):
--   leases  ZSET  member = lease id (= ticket id), score = expiry in ms (Redis clock); a grant starts with
--                 a short expiry (the pick-up window) that the waiter's claim extends to the lease TTL
--   queue   ZSET  all scores 0; member = 4-digit inverted priority .. 15-digit SFQ start tag ..
--                 15-digit arrival sequence .. ticket id, so byte order is grant order
--   waiters HASH  ticket id -> "<deadline ms> <cost> <queue member> <tenant>"
--   clock   HASH  "_v" -> SFQ virtual time; "t:<tenant>" -> the tenant's finish tag
--   alive   HASH  instance -> its presence stamp (expiry in ms); a ticket is "<instance>:<random>", an
--                 instance one process of a gateway, "<gateway id>/<boot nonce>" (a restart is a new one)
--   wake:<ticket> LIST  one element pushed when the ticket is granted (its owner BLPOPs it)

local PREFIX_LEN = 34

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The gateway instance a ticket belongs to (nil for a ticket written without one, by a tool or a test).
local function owner_of(ticket)
  return string.match(ticket, '^(.*):[^:]*$')
end

local function waiter_entry(deadline, cost, member, tenant)
  return string.format('%d %d ', deadline, cost) .. member .. ' ' .. tenant
end

-- deadline, cost, queue member, tenant
local function parse_entry(entry)
  local deadline, cost, member, tenant = string.match(entry, '^(%d+) (%d+) (%S+) (.*)$')
  return tonumber(deadline), tonumber(cost), member, tenant
end

-- Give a tenant's finish tag back what a request that never ran was charged (never below zero).
local function refund(clock, tenant, cost)
  local field = 't:' .. tenant
  local finish = tonumber(redis.call('HGET', clock, field) or '0')
  local after = math.max(0, finish - cost)
  redis.call('HSET', clock, field, string.format('%d', after))
  return after
end

-- Remove a waiter from the queue and refund its tenant's tag: it will never run.
local function drop_waiter(queue, waiters, clock, ticket, entry)
  local _, cost, member, tenant = parse_entry(entry)
  redis.call('ZREM', queue, member)
  redis.call('HDEL', waiters, ticket)
  refund(clock, tenant, cost)
end

-- Whether a ticket's gateway instance is present (its stamp not expired); ``seen`` caches answers per call.
local function owner_alive(alive, ticket, now, seen)
  local owner = owner_of(ticket)
  if not owner then
    return true
  end
  if seen[owner] == nil then
    seen[owner] = tonumber(redis.call('HGET', alive, owner) or '0') >= now
  end
  return seen[owner]
end

-- Drop expired leases (and unclaimed grants), then grant free slots to the head of the queue: only to a
-- waiter still within its deadline whose gateway is present; the others are dropped and refunded.
local function pump(leases, queue, waiters, clock, alive, wake_prefix, capacity, pickup_ms, now)
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  local active = redis.call('ZCARD', leases)
  local granted = 0
  local seen = {}
  while active < capacity do
    local head = redis.call('ZPOPMIN', queue)
    if #head == 0 then
      break
    end
    local member = head[1]
    local ticket = string.sub(member, PREFIX_LEN + 1)
    local entry = redis.call('HGET', waiters, ticket)
    if entry then
      if parse_entry(entry) >= now and owner_alive(alive, ticket, now, seen) then
        redis.call('HDEL', waiters, ticket)
        redis.call('ZADD', leases, now + pickup_ms, ticket)
        local wake = wake_prefix .. ticket
        redis.call('RPUSH', wake, '1')
        redis.call('PEXPIRE', wake, pickup_ms)
        local start = tonumber(string.sub(member, 5, 19))
        if start > tonumber(redis.call('HGET', clock, '_v') or '0') then
          redis.call('HSET', clock, '_v', string.format('%d', start))
        end
        active = active + 1
        granted = granted + 1
      else
        drop_waiter(queue, waiters, clock, ticket, entry)
      end
    end
  end
  return granted
end
