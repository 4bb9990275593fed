-- ARGV: P, bid -> {json, status} or {}
local id = active_ck(ARGV[2])
if not id then return {} end
return redis.call('HMGET', P .. 'ck:' .. id, 'json', 'status')
