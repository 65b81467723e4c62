-- Write (or refresh) one replica's record for ttl_ms and drop the model's expired ones.
-- KEYS: the model's registry hash
-- ARGV: replica id, record JSON, ttl_ms
-- Returns the record's expiry (ms, Redis clock): the caller stamps the model list with it.
local now = now_ms()
local expiry = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d ', expiry) .. ARGV[2])
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  if tonumber(string.match(entries[i + 1], '^(%d+) ')) < now then
    redis.call('HDEL', KEYS[1], entries[i])
  end
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))  -- the hash goes with its last publisher
end
return expiry
