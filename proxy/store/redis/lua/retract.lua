-- KEYS: the conversation's. ARGV: cid, bid, end_seq, then the chain hashes of the events to
-- retract, oldest first -> 1 when undone, 0 when anything moved meanwhile (nothing changed);
-- see Store.retract. The caller then removes the hashes from the tenant-wide index.
local cid, bid, end_seq = ARGV[1], ARGV[2], tonumber(ARGV[3])
local n = #ARGV - 3
if n < 1 or gone(cid) then return 0 end
local parent, fork, head = branch(bid)
if not head or head ~= end_seq or end_seq - fork < n then return 0 end
local cut = end_seq - n
for i = 1, n do
  if redis.call('HGET', CHAIN, bid .. ':' .. (cut + i)) ~= ARGV[3 + i] then return 0 end
end
-- The fork this append created, left without events of its own, goes with them.
local drop = parent and cut == fork
local branches = redis.call('LRANGE', BLIST, 0, -1)
for _, child in ipairs(branches) do
  local p, f = branch(child)
  if p == bid and (f > cut or drop) then return 0 end
end
for i = 1, n do
  local at = bid .. ':' .. (cut + i)
  redis.call('HDEL', EVENTS, at)
  redis.call('HDEL', CHAIN, at, 'h:' .. ARGV[3 + i])
end
if not drop then
  bset(bid, 'head', cut)
  return 1
end
local fields = {}
for _, f in ipairs({'parent', 'fork', 'head', 'created', 'updated', 'sys', 'active'}) do
  table.insert(fields, bid .. ':' .. f)
end
redis.call('HDEL', BRANCHES, unpack(fields))
redis.call('LREM', BLIST, 0, bid)
redis.call('HDEL', LEASES, 'lease:' .. bid, 'token:' .. bid)
for _, id in ipairs(redis.call('LRANGE', CKLIST, 0, -1)) do
  if ckget(id, 'branch') == bid then
    redis.call('LREM', CKLIST, 0, id)
    redis.call('HDEL', CKS, id, id .. ':status', id .. ':gen', id .. ':covered', id .. ':branch', id .. ':created')
    redis.call('ZREM', CKS_RETIRED, cid .. '|' .. id)
  end
end
return 1
