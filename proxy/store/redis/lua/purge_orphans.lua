-- KEYS: a shard's orphan-calls hash, call-index. ARGV: before, call ids... -> how many deleted
local before, n = tonumber(ARGV[1]), 0
for i = 2, #ARGV do
  local member = '|' .. ARGV[i]
  local score = tonumber(redis.call('ZSCORE', KEYS[2], member))
  if score and score < before then
    n = n + redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('ZREM', KEYS[2], member)
  end
end
return n
