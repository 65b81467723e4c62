-- Stamp a member of a stamp set present until now + ttl_ms (GT: never shortens a stamp; it still adds a
-- new member), drop the expired members, and return the live ones: O(members).
-- KEYS: the stamp set
-- ARGV: member ('' to only read), ttl_ms
local now = now_ms()
if ARGV[1] ~= '' then
  redis.call('ZADD', KEYS[1], 'GT', now + tonumber(ARGV[2]), ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZRANGE', KEYS[1], 0, -1)
