-- Prepended to every script. ARGV[1] is always the key prefix P. Scripts answer {'OK', ...},
-- {'GONE'} (the conversation does not exist / was deleted), {'STALE'} (a checkpoint candidate
-- lost) or {'NOBRANCH'}.
local P = ARGV[1]
local function bkey(b) return P .. 'branch:' .. b end

-- The branch's active checkpoint id, or the newest ancestor checkpoint (active or superseded)
-- that covers nothing past the (smallest) fork point on the way up, as in sqlite/checkpoints.py.
local function active_ck(bid)
  local own = redis.call('HGET', bkey(bid), 'active_ck')
  if own then return own end
  local cur = bid
  local limit = nil
  while true do
    local b = redis.call('HMGET', bkey(cur), 'parent_id', 'fork_seq')
    if not b[1] then return nil end
    local fork = tonumber(b[2])
    if limit == nil or fork < limit then limit = fork end
    local ids = redis.call('ZREVRANGE', P .. 'branch-cks:' .. b[1], 0, -1)
    for _, id in ipairs(ids) do
      local cov = tonumber(redis.call('HGET', P .. 'ck:' .. id, 'covered'))
      if cov and cov <= limit then return id end
    end
    cur = b[1]
  end
end

-- The chain hash of the event at `seq` in the lineage of `bid` (sqlite/checkpoints.py _lineage_hash).
local function lineage_hash(bid, seq)
  local cur = bid
  while cur do
    local b = redis.call('HMGET', bkey(cur), 'parent_id', 'fork_seq', 'head_seq')
    if not b[2] then return nil end
    local fork, head = tonumber(b[2]), tonumber(b[3])
    if seq > fork and seq <= head then
      return redis.call('LINDEX', P .. 'chain:' .. cur, seq - fork - 1)
    end
    if (not b[1]) or fork < seq then return nil end
    cur = b[1]
  end
  return nil
end

local function own(cid, ...)
  redis.call('SADD', P .. 'conv-keys:' .. cid, ...)
end

local function index_prefix(tenant)
  return P .. 'hash:' .. #tenant .. ':' .. tenant .. ':'
end
