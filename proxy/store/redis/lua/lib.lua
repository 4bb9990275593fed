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

-- A call record of conversation `cid` (record_call.lua, record_answered.lua); false, writing
-- nothing, when the conversation was deleted. bid '' = no branch.
local function record(cid, call_id, bid, purpose, started, json)
  if redis.call('ZSCORE', TOMBSTONES, cid) then return false end
  redis.call('HSET', RECORDS, call_id, json)
  redis.call('ZADD', CALLS, started, call_id)
  redis.call('ZADD', CALL_INDEX, started, cid .. '|' .. call_id)
  if bid ~= '' then
    local field = bid .. '|' .. purpose
    local last = redis.call('HGET', LAST, field)
    if (not last) or tonumber(string.match(last, '^(%S+) ')) <= tonumber(started) then
      redis.call('HSET', LAST, field, started .. ' ' .. call_id)
    end
  end
  return true
end

-- Append after `seq` on `br` (append.lua, record_answered.lua): the (chain_hash, event_json)
-- pairs of args from index `at` on -> {'OK', bid, seq} | {'GONE'} | {'NOBRANCH', bid} | {'STALE'}.
-- has_sys: '1' stamp and set the system hash, '0' stamp only, 'quiet' neither (an unanswered
-- request): heads move, no branch's or conversation's updated_at does.
-- expect: '' for a plain append; else `extend`'s guard: the start must still be its branch's head,
-- holding the chain hash `expect`, and the first event must be new ({'STALE'}, nothing written).
local function append(cid, br, seq, has_sys, sys, now, fork_base, expect, args, at)
  local quiet = has_sys == 'quiet'
  if gone(cid) then return {'GONE'} end
  if expect ~= '' and (
    redis.call('HGET', CHAIN, 'h:' .. expect) ~= br .. ' ' .. seq
    or tonumber(bget(br, 'head')) ~= seq
    or redis.call('HEXISTS', CHAIN, 'h:' .. args[at]) == 1
  ) then
    return {'STALE'}
  end
  local forks = 0
  for i = at, #args, 2 do
    local h, payload = args[i], args[i + 1]
    local hit = redis.call('HGET', CHAIN, 'h:' .. h)
    if hit then
      local b, s = string.match(hit, '^(%S+) (%d+)$')
      br, seq = b, tonumber(s)
    else
      local head = tonumber(bget(br, 'head'))
      if not head then return {'NOBRANCH', br} end
      if head ~= seq then
        forks = forks + 1
        local child = 'b_' .. string.sub(cid, 3) .. '_' .. fork_base
        if forks > 1 then child = child .. '_' .. forks end
        bset(child, 'parent', br, 'fork', seq, 'head', seq, 'created', now, 'updated', now)
        redis.call('RPUSH', BLIST, child)
        br = child
      end
      seq = seq + 1
      local where = br .. ':' .. seq
      redis.call('HSET', EVENTS, where, payload)
      redis.call('HSET', CHAIN, where, h, 'h:' .. h, br .. ' ' .. seq)
      if quiet then bset(br, 'head', seq) else bset(br, 'head', seq, 'updated', now) end
    end
  end
  if quiet then return {'OK', br, tostring(seq)} end
  if bget(br, 'head') then
    if has_sys == '1' then bset(br, 'sys', sys, 'updated', now) else bset(br, 'updated', now) end
  end
  redis.call('HSET', CONV, 'updated_at', now)
  redis.call('ZADD', CONVS, now, cid)
  return {'OK', br, tostring(seq)}
end
