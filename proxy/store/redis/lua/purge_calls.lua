-- KEYS: the conversation's. ARGV: cid, before, call ids... (read from the shard's call index)
-- -> how many call records were deleted
local cid, before = ARGV[1], tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local member = cid .. '|' .. id
  local score = tonumber(redis.call('ZSCORE', CALL_INDEX, member))
  if score and score < before then
    local payload = redis.call('HGET', RECORDS, id)
    if payload then
      local c = cjson.decode(payload)
      if type(c['branch_id']) == 'string' and type(c['purpose']) == 'string' then
        local field = c['branch_id'] .. '|' .. c['purpose']
        local last = redis.call('HGET', LAST, field)
        if last and string.match(last, '^%S+ (.*)$') == id then redis.call('HDEL', LAST, field) end
      end
      redis.call('HDEL', RECORDS, id)
      n = n + 1
    end
    redis.call('ZREM', CALLS, id)
    redis.call('ZREM', CALL_INDEX, member)
  end
end
return n
