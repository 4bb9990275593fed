-- ARGV: P, before, batch -> how many retired checkpoints were deleted
local ids = redis.call('ZRANGEBYSCORE', P .. 'cks-retired', '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local n = 0
for _, id in ipairs(ids) do
  local ck = P .. 'ck:' .. id
  local h = redis.call('HMGET', ck, 'json', 'branch', 'status')
  if h[1] and h[3] ~= 'active' then
    local cid = cjson.decode(h[1])['conversation_id']
    redis.call('LREM', P .. 'conv-cks:' .. cid, 0, id)
    redis.call('ZREM', P .. 'branch-cks:' .. h[2], id)
    redis.call('SREM', P .. 'conv-keys:' .. cid, ck)
    redis.call('UNLINK', ck)
    n = n + 1
  end
  redis.call('ZREM', P .. 'cks-retired', id)
end
return {n, #ids}
