-- Memory records (memories.py): KEYS[1] the tag's records hash, KEYS[2] the tag's index zset,
-- KEYS[3] the tenant's zset, KEYS[4] the scope's set (all of one tenant's slot; the
-- conversation keys of lib.lua are not used). ARGV: groups of (id, json, updated_at, expect):
-- expect 'new' (the id must not exist) or the stored record's updated_at as read (compare and
-- set on the tenant's zset score). Every check passes before anything is written -> 1, else 0.
local MEMS, INDEX, TENANT, SCOPE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
for i = 1, #ARGV, 4 do
  local id, expect = ARGV[i], ARGV[i + 3]
  local score = redis.call('ZSCORE', TENANT, id)
  if expect == 'new' then
    if redis.call('HEXISTS', MEMS, id) == 1 then return 0 end
  elseif (not score) or tonumber(score) ~= tonumber(expect) or redis.call('SISMEMBER', SCOPE, id) == 0 then
    return 0
  end
end
for i = 1, #ARGV, 4 do
  local id, json, updated = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  redis.call('HSET', MEMS, id, json)
  redis.call('ZADD', INDEX, updated, id)
  redis.call('ZADD', TENANT, updated, id)
  redis.call('SADD', SCOPE, id)
end
return 1
