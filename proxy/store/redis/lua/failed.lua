-- ARGV: P, cid, bid, ckid, json, covered, created_at
local cid, bid, ckid = ARGV[2], ARGV[3], ARGV[4]
if redis.call('EXISTS', P .. 'conv:' .. cid) == 0 then return {'GONE'} end
local ck = P .. 'ck:' .. ckid
redis.call('HSET', ck, 'json', ARGV[5], 'status', 'failed', 'covered', ARGV[6], 'branch', bid)
redis.call('ZADD', P .. 'cks-retired', ARGV[7], ckid)
redis.call('RPUSH', P .. 'conv-cks:' .. cid, ckid)
own(cid, ck, P .. 'conv-cks:' .. cid)
return {'OK'}
