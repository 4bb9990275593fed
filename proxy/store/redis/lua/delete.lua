-- ARGV: P, cid, now -> 1 when the conversation existed
local cid, now = ARGV[2], ARGV[3]
local conv = P .. 'conv:' .. cid
local tenant = redis.call('HGET', conv, 'tenant')
if tenant then
  local idx = index_prefix(tenant)
  for _, bid in ipairs(redis.call('LRANGE', P .. 'conv-branches:' .. cid, 0, -1)) do
    for _, h in ipairs(redis.call('LRANGE', P .. 'chain:' .. bid, 0, -1)) do
      redis.call('HDEL', idx .. h, cid)
    end
  end
end
for _, call_id in ipairs(redis.call('ZRANGE', P .. 'conv-calls:' .. cid, 0, -1)) do
  redis.call('ZREM', P .. 'calls', call_id)
end
for _, ckid in ipairs(redis.call('LRANGE', P .. 'conv-cks:' .. cid, 0, -1)) do
  redis.call('ZREM', P .. 'cks-retired', ckid)
end
local keys = P .. 'conv-keys:' .. cid
for _, key in ipairs(redis.call('SMEMBERS', keys)) do
  redis.call('UNLINK', key)
end
redis.call('UNLINK', keys, conv, P .. 'conv-branches:' .. cid, P .. 'conv-cks:' .. cid, P .. 'conv-calls:' .. cid)
redis.call('ZREM', P .. 'convs', cid)
if tenant then
  redis.call('ZADD', P .. 'tombstones', now, cid)
  return 1
end
return 0
