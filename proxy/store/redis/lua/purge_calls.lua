-- ARGV: P, before, batch -> how many call records were deleted
local ids = redis.call('ZRANGEBYSCORE', P .. 'calls', '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local n = 0
for _, id in ipairs(ids) do
  local key = P .. 'call:' .. id
  local payload = redis.call('GET', key)
  if payload then
    local c = cjson.decode(payload)
    local cid, bid, purpose = c['conversation_id'], c['branch_id'], c['purpose']
    if type(cid) == 'string' then
      redis.call('ZREM', P .. 'conv-calls:' .. cid, id)
      redis.call('SREM', P .. 'conv-keys:' .. cid, key)
    end
    if type(bid) == 'string' and type(purpose) == 'string' then
      redis.call('ZREM', P .. 'last-call:' .. #purpose .. ':' .. purpose .. ':' .. bid, id)
    end
    redis.call('UNLINK', key)
    n = n + 1
  end
  redis.call('ZREM', P .. 'calls', id)
end
return {n, #ids}
