-- A request ends having used less than the cost it was queued with: its tenant's fair-share finish tag
-- gives the unused part back, so that the tenant's next requests start where its real usage puts them.
-- KEYS: clock
-- ARGV: tenant, tokens
-- Returns the tenant's finish tag after the refund (never below zero).
return refund(KEYS[1], ARGV[1], tonumber(ARGV[2]))
