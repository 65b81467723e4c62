-- Shared by the prefix-index scripts (gateway/routing/shared_index.py); the reference of every step is
-- gateway/routing/prefix_index.py. KEYS[1]: holders hash (chain key -> "id id ..."), KEYS[2]: instances
-- hash (replica -> instance id).

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

-- every entry of one replica, then its LRU (members sorted, as the reference does)
local function purge(lru_key, id)
  local members = redis.call('ZRANGE', lru_key, 0, -1)
  table.sort(members)
  for _, key in ipairs(members) do drop_holder(key, id) end
  redis.call('DEL', lru_key)
end
