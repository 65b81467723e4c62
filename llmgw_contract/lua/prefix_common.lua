-- Shared by the prefix-index scripts: the gateway's (gateway/routing/prefix/shared_index.py) and the managing
-- agents' (llmgw_contract/kv_feed.py); the reference of every step is gateway/routing/prefix/index.py.
-- KEYS[1]: holders hash (chain key -> "id id ..."), KEYS[2]: instances hash (replica -> instance id).

local function split(s)
  local t = {}
  for w in string.gmatch(s, '%S+') do t[#t + 1] = w end
  return t
end

local function without(s, id)
  local out = {}
  if s then
    for _, w in ipairs(split(s)) do
      if w ~= id then out[#out + 1] = w end
    end
  end
  return out
end

local function drop_holder(key, id)
  local rest = without(redis.call('HGET', KEYS[1], key), id)
  if #rest == 0 then
    redis.call('HDEL', KEYS[1], key)
  else
    redis.call('HSET', KEYS[1], key, table.concat(rest, ' '))
  end
end

-- every entry of one replica: its placements (LRU) and what its engine holds (KV set), then both keys
local function purge(lru_key, kv_key, id)
  local members = redis.call('ZRANGE', lru_key, 0, -1)
  for _, key in ipairs(redis.call('SMEMBERS', kv_key)) do members[#members + 1] = key end
  table.sort(members)
  for _, key in ipairs(members) do drop_holder(key, id) end
  redis.call('DEL', lru_key, kv_key)
end

-- a holder learnt from the engine goes last (placements go first)
local function add_holder(key, id)
  local got = redis.call('HGET', KEYS[1], key)
  for _, w in ipairs(got and split(got) or {}) do
    if w == id then return end
  end
  redis.call('HSET', KEYS[1], key, got and (got .. ' ' .. id) or id)
end
