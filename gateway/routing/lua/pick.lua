-- One pick: drop restarted replicas' entries, decide, record. At most one round trip per pick.
-- KEYS[3]: clock, KEYS[4]: the session's key (unused without a session), KEYS[4 + i]: LRU of replica i.
-- ARGV: n, p, q, has_session (0/1), session_ttl_ms, then per replica id, instance, load, capacity,
-- then the chain keys. Returns {replica id, outcome, depth}.
local n, p, q = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local has_session, ttl = ARGV[4] == '1', tonumber(ARGV[5])
local ids, inst, load, cap, index_of = {}, {}, {}, {}, {}
local total = 0
for i = 1, n do
  local b = 5 + (i - 1) * 4
  ids[i], inst[i], load[i], cap[i] = ARGV[b + 1], ARGV[b + 2], tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  index_of[ids[i]] = i
  total = total + load[i]
end
local chain = {}
for j = 6 + n * 4, #ARGV do chain[#chain + 1] = ARGV[j] end

-- 1. restarted (or first seen) replicas: drop their entries, remember their instance
local stored = redis.call('HMGET', KEYS[2], unpack(ids))
for i = 1, n do
  if stored[i] ~= inst[i] then
    purge(KEYS[4 + i], ids[i])
    redis.call('HSET', KEYS[2], ids[i], inst[i])
  end
end

-- 2. decide
local function accepts(i) return load[i] * q * n < p * (total + 1) end
local tie = chain[1] or ''
local function least_loaded()
  local best, best_h = 1, nil
  for i = 2, n do
    if load[i] < load[best] then
      best, best_h = i, nil
    elseif load[i] == load[best] then
      best_h = best_h or redis.sha1hex(tie .. '\0' .. ids[best])
      local h = redis.sha1hex(tie .. '\0' .. ids[i])
      if h < best_h or (h == best_h and ids[i] < ids[best]) then best, best_h = i, h end
    end
  end
  return best
end

local got = {}
if #chain > 0 then got = redis.call('HMGET', KEYS[1], unpack(chain)) end
local depth, outcome, held = 0, 'cold', nil
for j = #chain, 1, -1 do
  if got[j] then
    local known = false
    for _, h in ipairs(split(got[j])) do
      local i = index_of[h]
      if i then
        known = true
        if accepts(i) then held = i break end
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
if si and accepts(si) then
  chosen, outcome = si, 'session'
elseif held then
  chosen, outcome = held, 'hit'
else
  chosen = least_loaded()
end

-- 3. record
local id = ids[chosen]
if #chain > 0 then
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
  local lru = KEYS[4 + chosen]
  redis.call('ZADD', lru, unpack(scored))
  local over = redis.call('ZCARD', lru) - cap[chosen]
  if over > 0 then
    local popped = redis.call('ZPOPMIN', lru, over)
    for k = 1, #popped, 2 do drop_holder(popped[k], id) end
  end
end
if has_session then redis.call('SET', KEYS[4], id, 'PX', ttl) end
return {id, outcome, depth}
