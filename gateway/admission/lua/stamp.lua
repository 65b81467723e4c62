-- A gateway's presence stamp for one model, renewed (by its renewing thread, while its event loop lives).
-- KEYS: alive
-- ARGV: instance (a gateway process), presence_ms
-- Returns the stamp written (expiry, ms on Redis' clock).
local expiry = now_ms() + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], expiry)
return expiry
