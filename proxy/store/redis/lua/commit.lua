-- ARGV: P, cid, bid, parent_generation, covered_through_seq, source_hash, ckid, json, lease_token ('' = none)
local cid, bid = ARGV[2], ARGV[3]
local parent, covered, source, ckid, payload = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]
if redis.call('EXISTS', P .. 'conv:' .. cid) == 0 then return {'GONE'} end
if ARGV[9] ~= '' and redis.call('GET', P .. 'lease-token:' .. bid) ~= ARGV[9] then return {'STALE'} end
if redis.call('HGET', bkey(bid), 'conversation_id') ~= cid then return {'STALE'} end
local active = active_ck(bid)
local generation = 0
if active then generation = tonumber(redis.call('HGET', P .. 'ck:' .. active, 'generation')) end
if generation ~= parent then return {'STALE'} end
if lineage_hash(bid, covered) ~= source then return {'STALE'} end
local previous = redis.call('HGET', bkey(bid), 'active_ck')
if previous then
  redis.call('HSET', P .. 'ck:' .. previous, 'status', 'superseded')
  local old = redis.call('HGET', P .. 'ck:' .. previous, 'json')
  if old then redis.call('ZADD', P .. 'cks-retired', cjson.decode(old)['created_at'], previous) end
end
local ck = P .. 'ck:' .. ckid
redis.call('HSET', ck, 'json', payload, 'status', 'active', 'generation', parent + 1, 'covered', covered,
           'branch', bid)
redis.call('ZADD', P .. 'branch-cks:' .. bid, parent + 1, ckid)
redis.call('HSET', bkey(bid), 'active_ck', ckid)
redis.call('RPUSH', P .. 'conv-cks:' .. cid, ckid)
own(cid, ck, P .. 'branch-cks:' .. bid, P .. 'conv-cks:' .. cid)
return {'OK'}
