-- Shared by the registry and presence scripts (prepended when a script is loaded).
-- A registry hash (one per model, under the model's hash tag): replica id -> "<expiry ms> <record JSON>".
-- A stamp set (ZSET): member -> expiry ms. Expiry is on Redis' own clock, so no client clock is trusted.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
