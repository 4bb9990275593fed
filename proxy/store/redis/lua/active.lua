-- KEYS: the conversation's. ARGV: bid -> {json, status} or {}
local id = active_ck(ARGV[1])
if not id then return {} end
return {redis.call('HGET', CKS, id), ckget(id, 'status')}
