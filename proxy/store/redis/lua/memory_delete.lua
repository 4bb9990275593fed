-- KEYS as memory_put.lua (the record's tenant and scope). ARGV: ids -> how many records were removed.
local removed = 0
for _, id in ipairs(ARGV) do
  removed = removed + redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('SREM', KEYS[4], id)
end
return removed
