-- Drop the replicas that left the registry. ARGV[1], ARGV[2]: the LRU and KV-set key prefixes (+ replica
-- id), then the ids still registered. Returns the ids dropped, sorted.
local present = {}
for j = 3, #ARGV do present[ARGV[j]] = true end
local gone = {}
local known = redis.call('HKEYS', KEYS[2])
for _, id in ipairs(known) do
  if not present[id] then gone[#gone + 1] = id end
end
table.sort(gone)
for _, id in ipairs(gone) do
  purge(ARGV[1] .. id, ARGV[2] .. id, id)
  redis.call('HDEL', KEYS[2], id)
end
return gone
