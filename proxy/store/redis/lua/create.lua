-- ARGV: P, cid, bid, tenant, has_ext, ext_key, now, external_id
local cid, bid, tenant, has_ext, ext_key, now = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local conv = P .. 'conv:' .. cid
if has_ext == '1' then
  local existing = redis.call('GET', ext_key)
  if existing and redis.call('EXISTS', P .. 'conv:' .. existing) == 1 then
    return {'EXISTS', existing}
  end
end
if redis.call('EXISTS', conv) == 1 or redis.call('ZSCORE', P .. 'tombstones', cid) then
  return {'EXISTS', cid}
end
redis.call('HSET', conv, 'id', cid, 'tenant', tenant, 'main_branch_id', bid, 'created_at', now, 'updated_at', now)
own(cid, conv, P .. 'conv-branches:' .. cid, bkey(bid), P .. 'events:' .. bid, P .. 'chain:' .. bid)
if has_ext == '1' then
  redis.call('HSET', conv, 'external_id', ARGV[8])
  redis.call('SET', ext_key, cid)
  own(cid, ext_key)
end
redis.call('HSET', bkey(bid), 'conversation_id', cid, 'fork_seq', 0, 'head_seq', 0, 'created_at', now,
           'updated_at', now)
redis.call('RPUSH', P .. 'conv-branches:' .. cid, bid)
redis.call('ZADD', P .. 'convs', now, cid)
return {'OK', cid}
