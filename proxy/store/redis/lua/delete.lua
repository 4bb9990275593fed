-- KEYS: the conversation's, [16] its external-id key when it has one. ARGV: cid, now, external_id,
-- only_if_empty ('1': only while it has one branch, no events and no call records)
-- -> {'OK', tenant, chain hashes...} | {'NONE'} | {'RETRY'} (the external id was not what the caller
-- read) | {'KEPT'} (not empty)
local cid, now = ARGV[1], ARGV[2]
local conv = redis.call('HMGET', CONV, 'tenant', 'external_id')
local tenant = conv[1]
if not tenant then return {'NONE'} end
if (conv[2] or '') ~= (ARGV[3] or '') or (conv[2] and not KEYS[16]) then return {'RETRY'} end
if ARGV[4] == '1' and (redis.call('LLEN', BLIST) > 1 or redis.call('HLEN', EVENTS) > 0
    or redis.call('ZCARD', CALLS) > 0) then
  return {'KEPT'}
end
local out = {'OK', tenant}
local fields = redis.call('HKEYS', CHAIN)
for _, f in ipairs(fields) do
  if string.sub(f, 1, 2) == 'h:' then table.insert(out, string.sub(f, 3)) end
end
for _, call_id in ipairs(redis.call('ZRANGE', CALLS, 0, -1)) do
  redis.call('ZREM', CALL_INDEX, cid .. '|' .. call_id)
end
for _, ckid in ipairs(redis.call('LRANGE', CKLIST, 0, -1)) do
  redis.call('ZREM', CKS_RETIRED, cid .. '|' .. ckid)
end
for i = 1, 11 do redis.call('UNLINK', KEYS[i]) end
if KEYS[16] then redis.call('UNLINK', KEYS[16]) end
redis.call('ZREM', CONVS, cid)
redis.call('ZADD', TOMBSTONES, now, cid)
return out
