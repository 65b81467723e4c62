-- Delete KEYS[1] when its value is ARGV[1] (the supervisor's 'awoken' marker, never a gateway's wake
-- request); 1 when deleted.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
