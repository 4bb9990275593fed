-- ARGV: P, bid, owner, ttl_ms -> {'OK', token} | {'HELD'} | {'NOBRANCH'}
local bid, owner, ttl = ARGV[2], ARGV[3], ARGV[4]
local cid = redis.call('HGET', bkey(bid), 'conversation_id')
if not cid then return {'NOBRANCH'} end
local lease, counter = P .. 'lease:' .. bid, P .. 'lease-token:' .. bid
local held = redis.call('GET', lease)
if held and string.match(held, '^(.*) %d+$') ~= owner then return {'HELD'} end
local token = redis.call('INCR', counter)
redis.call('SET', lease, owner .. ' ' .. token, 'PX', ttl)
own(cid, lease, counter)
return {'OK', tostring(token)}
