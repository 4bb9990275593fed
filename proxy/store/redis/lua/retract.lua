-- ARGV: P, cid, bid, end_seq, then the chain hashes of the events to retract, oldest first
-- -> 1 when undone, 0 when anything moved meanwhile (nothing changed); see Store.retract.
local cid, bid, end_seq = ARGV[2], ARGV[3], tonumber(ARGV[4])
local n = #ARGV - 4
local tenant = redis.call('HGET', P .. 'conv:' .. cid, 'tenant')
if not tenant or n < 1 then return 0 end
local b = redis.call('HMGET', bkey(bid), 'head_seq', 'fork_seq', 'parent_id')
if not b[1] or tonumber(b[1]) ~= end_seq then return 0 end
local own_n = end_seq - tonumber(b[2])
if own_n < n then return 0 end
local stored = redis.call('LRANGE', P .. 'chain:' .. bid, own_n - n, -1)
for i = 1, n do
  if stored[i] ~= ARGV[4 + i] then return 0 end
end
local cut = end_seq - n
for _, child in ipairs(redis.call('LRANGE', P .. 'conv-branches:' .. cid, 0, -1)) do
  local c = redis.call('HMGET', bkey(child), 'parent_id', 'fork_seq')
  if c[1] == bid and tonumber(c[2]) > cut then return 0 end
end
local idx = index_prefix(tenant)
for i = 1, n do
  redis.call('HDEL', idx .. ARGV[4 + i], cid)
end
local events, chain = P .. 'events:' .. bid, P .. 'chain:' .. bid
if own_n == n and b[3] then
  redis.call('UNLINK', bkey(bid), events, chain)
  redis.call('LREM', P .. 'conv-branches:' .. cid, 0, bid)
  redis.call('SREM', P .. 'conv-keys:' .. cid, bkey(bid), events, chain)
  return 1
end
if own_n == n then
  redis.call('UNLINK', events, chain)
else
  redis.call('LTRIM', events, 0, own_n - n - 1)
  redis.call('LTRIM', chain, 0, own_n - n - 1)
end
redis.call('HSET', bkey(bid), 'head_seq', cut)
return 1
