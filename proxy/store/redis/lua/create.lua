-- KEYS: the conversation's, [16] its external-id key when it has one.
-- ARGV: cid, bid, tenant, now, external_id -> {'OK', cid} | {'EXISTS', cid}
local cid, bid, tenant, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local ext = KEYS[16]
if ext then
  local existing = redis.call('GET', ext)
  if existing then return {'EXISTS', existing} end  -- the key lives and dies with its conversation
end
if redis.call('EXISTS', CONV) == 1 or redis.call('ZSCORE', TOMBSTONES, cid) then
  return {'EXISTS', cid}
end
redis.call('HSET', CONV, 'id', cid, 'tenant', tenant, 'main_branch_id', bid, 'created_at', now, 'updated_at', now)
if ext then
  redis.call('HSET', CONV, 'external_id', ARGV[5])
  redis.call('SET', ext, cid)
end
bset(bid, 'fork', 0, 'head', 0, 'created', now, 'updated', now)
redis.call('RPUSH', BLIST, bid)
redis.call('ZADD', CONVS, now, cid)
return {'OK', cid}
