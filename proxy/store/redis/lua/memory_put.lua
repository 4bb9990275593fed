-- Memory records (memories.py): KEYS[1] the tag's records hash, KEYS[2] the tag's index zset,
-- KEYS[3] the tenant's zset, KEYS[4] the scope's set (all of one tenant's slot; the
-- conversation keys of lib.lua are not used). ARGV: groups of (id, json, updated_at, expect):
-- expect 'new' (the id must not exist) or the stored record's updated_at as read (compare and
-- set on the tenant's zset score). Every check passes before anything is written -> 1, else 0.
for i = 1, #ARGV, 4 do
  local id, expect = ARGV[i], ARGV[i + 3]
  local score = redis.call('ZSCORE', KEYS[3], id)
  if expect == 'new' then
    if redis.call('HEXISTS', KEYS[1], id) == 1 then return 0 end
  elseif (not score) or tonumber(score) ~= tonumber(expect) or redis.call('SISMEMBER', KEYS[4], id) == 0 then
    return 0
  end
end
for i = 1, #ARGV, 4 do
  local id, json, updated = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  redis.call('HSET', KEYS[1], id, json)
  redis.call('ZADD', KEYS[2], updated, id)
  redis.call('ZADD', KEYS[3], updated, id)
  redis.call('SADD', KEYS[4], id)
end
return 1
