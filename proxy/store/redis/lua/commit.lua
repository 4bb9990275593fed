-- KEYS: the conversation's. ARGV: cid, bid, parent_generation, covered_through_seq, source_hash,
-- ckid, json, created_at, lease_token ('' = none) -> {'OK'} | {'STALE'} | {'GONE'}
local cid, bid = ARGV[1], ARGV[2]
local parent, covered, source, ckid, payload = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]
if gone(cid) then return {'GONE'} end
if ARGV[9] ~= '' and redis.call('HGET', LEASES, 'token:' .. bid) ~= ARGV[9] then return {'STALE'} end
if not bget(bid, 'head') then return {'STALE'} end
local active = active_ck(bid)
local generation = 0
if active then generation = tonumber(ckget(active, 'gen')) end
if generation ~= parent then return {'STALE'} end
if lineage_hash(bid, covered) ~= source then return {'STALE'} end
local previous = bget(bid, 'active')
if previous then
  redis.call('HSET', CKS, previous .. ':status', 'superseded')
  redis.call('ZADD', CKS_RETIRED, ckget(previous, 'created'), cid .. '|' .. previous)
end
redis.call('HSET', CKS, ckid, payload, ckid .. ':status', 'active', ckid .. ':gen', parent + 1,
           ckid .. ':covered', covered, ckid .. ':branch', bid, ckid .. ':created', ARGV[8])
bset(bid, 'active', ckid)
redis.call('RPUSH', CKLIST, ckid)
return {'OK'}
