-- One pick: drop restarted replicas' entries, decide, record. At most one round trip per pick.
-- KEYS[3]: clock, KEYS[4]: the session's key (unused without a session), KEYS[5]: the recent picks
-- (a list, latest first), KEYS[5 + i]: LRU of replica i, KEYS[5 + n + i]: KV set of replica i (what its
-- engine holds, written by its managing agent from vLLM's KV events).
-- ARGV: n, p, q (in-flight bound), has_session (0/1), session_ttl_ms, sp, sq (share bound), window,
-- detour (0/1: a retry or migration, which places nothing and only enters the recent picks), then per
-- replica id, instance, load, capacity, exact (0/1), then the chain keys.
-- Returns {replica id, outcome, depth}.
local n, p, q = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local has_session, ttl = ARGV[4] == '1', tonumber(ARGV[5])
local sp, sq, window = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local detour = ARGV[9] == '1'
local ids, inst, load, cap, exact, index_of = {}, {}, {}, {}, {}, {}
local total = 0
for i = 1, n do
  local b = 9 + (i - 1) * 5
  ids[i], inst[i], load[i], cap[i] = ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  exact[i] = ARGV[b + 5] == '1'
  index_of[ids[i]] = i
  total = total + load[i]
end
local chain = {}
for j = 10 + n * 5, #ARGV do chain[#chain + 1] = ARGV[j] end

-- 1. restarted (or first seen) replicas: drop their entries, remember their instance (an exact replica's
-- restarts are its managing agent's to follow: it resets the replica with its new instance)
local stored = redis.call('HMGET', KEYS[2], unpack(ids))
for i = 1, n do
  if stored[i] ~= inst[i] and not exact[i] then
    purge(KEYS[5 + i], KEYS[5 + n + i], ids[i])
    redis.call('HSET', KEYS[2], ids[i], inst[i])
  elseif not stored[i] then
    redis.call('HSET', KEYS[2], ids[i], inst[i])  -- first seen (exact): known, so that its departure is seen
  end
end

-- 2. decide: a replica qualifies when it passes the in-flight bound and the share bound
local recent, shares = {}, 0
for i = 1, n do recent[i] = 0 end
for _, rid in ipairs(redis.call('LRANGE', KEYS[5], 0, window - 1)) do
  local i = index_of[rid]
  if i then recent[i], shares = recent[i] + 1, shares + 1 end
end
local function qualifies(i)
  return load[i] * q * n < p * (total + 1) and recent[i] * sq * n < sp * (shares + 1)
end
local tie = chain[1] or ''
local keys_held = {}  -- keys each candidate holds (its LRU and KV set), read only for a new placement
local function before(i, j)  -- least loaded: keys held, load, recent share, the tie hash, then id
  if keys_held[i] ~= keys_held[j] then return keys_held[i] < keys_held[j] end
  if load[i] ~= load[j] then return load[i] < load[j] end
  if recent[i] ~= recent[j] then return recent[i] < recent[j] end
  local hi, hj = redis.sha1hex(tie .. '\0' .. ids[i]), redis.sha1hex(tie .. '\0' .. ids[j])
  if hi ~= hj then return hi < hj end
  return ids[i] < ids[j]
end
local function least_loaded()
  local any, best = false, nil
  for i = 1, n do any = any or qualifies(i) end
  for i = 1, n do
    keys_held[i] = any and redis.call('ZCARD', KEYS[5 + i]) + redis.call('SCARD', KEYS[5 + n + i]) or 0
  end
  for i = 1, n do
    if (not any or qualifies(i)) and (best == nil or before(i, best)) then best = i end
  end
  return best
end

local got = {}
if #chain > 0 then got = redis.call('HMGET', KEYS[1], unpack(chain)) end
local depth, outcome, held = 0, 'cold', nil
for j = #chain, 1, -1 do
  if got[j] then
    local known = false
    for _, h in ipairs(split(got[j])) do  -- holders, latest placed first: keep the first of equals
      local i = index_of[h]
      if i then
        known = true
        if qualifies(i) and (held == nil or recent[i] < recent[held]
            or (recent[i] == recent[held] and load[i] < load[held])) then
          held = i
        end
      end
    end
    if known then
      depth, outcome = j, 'moved'
      break
    end
  end
end
local chosen
local session = has_session and redis.call('GET', KEYS[4]) or false
local si = session and index_of[session]
if si and qualifies(si) then
  chosen, outcome = si, 'session'
elseif held then
  chosen, outcome = held, 'hit'
else
  chosen = least_loaded()
end

-- 3. record (a detour: only the recent picks)
local id = ids[chosen]
if #chain > 0 and not detour then
  local seq = redis.call('INCR', KEYS[3])
  local fields, scored = {}, {}
  for j = 1, #chain do
    local rest = without(got[j], id)
    table.insert(rest, 1, id)
    fields[#fields + 1] = chain[j]
    fields[#fields + 1] = table.concat(rest, ' ')
    scored[#scored + 1] = seq
    scored[#scored + 1] = chain[j]
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  local lru = KEYS[5 + chosen]
  redis.call('ZADD', lru, unpack(scored))
  local over = redis.call('ZCARD', lru) - cap[chosen]
  if over > 0 then
    local popped = redis.call('ZPOPMIN', lru, over)
    for k = 1, #popped, 2 do
      if redis.call('SISMEMBER', KEYS[5 + n + chosen], popped[k]) == 0 then drop_holder(popped[k], id) end
    end
  end
end
if has_session and not detour then redis.call('SET', KEYS[4], id, 'PX', ttl) end
redis.call('LPUSH', KEYS[5], id)
redis.call('LTRIM', KEYS[5], 0, window - 1)
return {id, outcome, depth}
