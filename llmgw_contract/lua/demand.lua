-- One model's demand, summed over every gateway, in one read (one hash tag: one Redis Cluster slot).
-- KEYS: queue (ZSET of waiters), leases (ZSET ticket -> expiry ms), inflight (HASH gateway ->
--       "<ms> <JSON {replica: n}>"), waiting_since (STRING: ms)
-- ARGV: max_age_ms (an in-flight share older than this is a stopped gateway's and counts nothing)
-- Returns {queued, running leases, in flight through the gateways, waiting since ms (0: nobody waits
-- with nothing running), Redis now ms}. The only write: ``waiting_since`` is stamped the first time a
-- request is seen waiting while nothing runs (a model at zero), and dropped once none waits so.
local queue, leases, inflight, since = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local max_age_ms = tonumber(ARGV[1])
local now = now_ms()

local queued = redis.call('ZCARD', queue)
local running = redis.call('ZCOUNT', leases, '(' .. now, '+inf')
local shared = 0
local values = redis.call('HVALS', inflight)
for i = 1, #values do
  local stamp, blob = string.match(values[i], '^(%d+) (.*)$')
  if stamp and now - tonumber(stamp) <= max_age_ms then
    local ok, counts = pcall(cjson.decode, blob)
    if ok and type(counts) == 'table' then
      for _, n in pairs(counts) do
        if type(n) == 'number' and n > 0 then
          shared = shared + n
        end
      end
    end
  end
end

local waiting = 0
if queued > 0 and running == 0 and shared == 0 then
  waiting = tonumber(redis.call('GET', since) or '0')
  if waiting == 0 then
    redis.call('SET', since, now, 'PX', 86400000)
    waiting = now
  end
elseif redis.call('EXISTS', since) == 1 then
  redis.call('DEL', since)
end
return {queued, running, shared, waiting, now}
