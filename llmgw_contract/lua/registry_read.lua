-- The model's live records (expired ones are dropped on the way): O(replicas of the model).
-- KEYS: the model's registry hash
-- Returns a flat list: replica id, record JSON, milliseconds left, ...
local now = now_ms()
local out = {}
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local expiry, record = string.match(entries[i + 1], '^(%d+) (.*)$')
  if expiry and tonumber(expiry) >= now then
    out[#out + 1] = entries[i]
    out[#out + 1] = record
    out[#out + 1] = tonumber(expiry) - now
  else
    redis.call('HDEL', KEYS[1], entries[i])
  end
end
return out
