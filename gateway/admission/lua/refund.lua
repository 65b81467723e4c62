-- A request ends having used less than the cost it was queued with: its tenant's fair-share finish tag
-- gives the unused part back, so that the tenant's next requests start where its real usage puts them.
-- KEYS: clock
-- ARGV: tenant, tokens
-- Returns the tenant's finish tag after the refund (never below zero).
local field = 't:' .. ARGV[1]
local finish = tonumber(redis.call('HGET', KEYS[1], field) or '0')
local after = math.max(0, finish - tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], field, string.format('%d', after))
return after
