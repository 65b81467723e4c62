-- What one replica's engine holds, from its KV events (llmgw_contract/kv_feed.py; the reference is
-- gateway/routing/prefix/index.py's PrefixIndex.apply_events). KEYS[1]: holders, KEYS[2]: instances,
-- KEYS[3]: the replica's LRU (placements), KEYS[4]: its KV set. ARGV: replica id, instance, reset (0/1),
-- the number of keys added, the keys added, then the keys removed. A new instance (a restart) or a reset
-- drops every entry of the replica first. Returns the KV set's size.
local id, instance, reset, n_added = ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
if reset or redis.call('HGET', KEYS[2], id) ~= instance then
  purge(KEYS[3], KEYS[4], id)
  redis.call('HSET', KEYS[2], id, instance)
end
for j = 5, 4 + n_added do
  redis.call('SADD', KEYS[4], ARGV[j])
  redis.call('ZREM', KEYS[3], ARGV[j])
  add_holder(ARGV[j], id)
end
for j = 5 + n_added, #ARGV do
  redis.call('SREM', KEYS[4], ARGV[j])
  redis.call('ZREM', KEYS[3], ARGV[j])
  drop_holder(ARGV[j], id)
end
return redis.call('SCARD', KEYS[4])
