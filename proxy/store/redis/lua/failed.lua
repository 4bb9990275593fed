-- KEYS: the conversation's. ARGV: cid, bid, ckid, json, covered, created_at
local cid, bid, ckid = ARGV[1], ARGV[2], ARGV[3]
if gone(cid) then return {'GONE'} end
redis.call('HSET', CKS, ckid, ARGV[4], ckid .. ':status', 'failed', ckid .. ':covered', ARGV[5],
           ckid .. ':branch', bid, ckid .. ':created', ARGV[6])
redis.call('ZADD', CKS_RETIRED, ARGV[6], cid .. '|' .. ckid)
redis.call('RPUSH', CKLIST, ckid)
return {'OK'}
