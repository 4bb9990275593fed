-- Prepended to every script. Every key a script touches comes in KEYS, all in one conversation's
-- slot (keys.py): KEYS[1..11] the conversation's keys, KEYS[12..15] its shard's, then extras.
-- Branches, events, checkpoints, calls and leases are fields inside them, never key names built
-- from values. Scripts answer {'OK', ...}, {'GONE'} (the conversation does not exist / was
-- deleted), {'STALE'} (a checkpoint candidate lost) or {'NOBRANCH'}.
local CONV, BRANCHES, BLIST, EVENTS, CHAIN = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local CKS, CKLIST, CALLS, RECORDS, LAST, LEASES = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local CONVS, TOMBSTONES, CALL_INDEX, CKS_RETIRED = KEYS[12], KEYS[13], KEYS[14], KEYS[15]

local function bget(bid, field) return redis.call('HGET', BRANCHES, bid .. ':' .. field) end
local function bset(bid, ...)
  local args = {...}
  for i = 1, #args, 2 do args[i] = bid .. ':' .. args[i] end
  redis.call('HSET', BRANCHES, unpack(args))
end
local function branch(bid)
  local b = redis.call('HMGET', BRANCHES, bid .. ':parent', bid .. ':fork', bid .. ':head')
  return b[1], tonumber(b[2]), tonumber(b[3])
end
local function ckget(id, field) return redis.call('HGET', CKS, id .. ':' .. field) end

-- The branch's active checkpoint id, or the newest ancestor checkpoint (active or superseded)
-- that covers nothing past the (smallest) fork point on the way up, as in sqlite/checkpoints.py.
local function active_ck(bid)
  local own = bget(bid, 'active')
  if own then return own end
  local cur, limit = bid, nil
  local list = nil
  while true do
    local parent, fork = branch(cur)
    if not parent then return nil end
    if limit == nil or fork < limit then limit = fork end
    list = list or redis.call('LRANGE', CKLIST, 0, -1)
    for i = #list, 1, -1 do  -- creation order = generation order within one branch
      local id = list[i]
      if ckget(id, 'branch') == parent and ckget(id, 'status') ~= 'failed' then
        local cov = tonumber(ckget(id, 'covered'))
        if cov and cov <= limit then return id end
      end
    end
    cur = parent
  end
end

-- The chain hash of the event at `seq` in the lineage of `bid` (sqlite/checkpoints.py _lineage_hash).
local function lineage_hash(bid, seq)
  local cur = bid
  while cur do
    local parent, fork, head = branch(cur)
    if not fork then return nil end
    if seq > fork and seq <= head then return redis.call('HGET', CHAIN, cur .. ':' .. seq) end
    if (not parent) or fork < seq then return nil end
    cur = parent
  end
  return nil
end

local function gone(cid)
  return redis.call('EXISTS', CONV) == 0 or redis.call('ZSCORE', TOMBSTONES, cid) ~= false
end

-- The server's clock in milliseconds (leases expire by it, whichever replica asks).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
