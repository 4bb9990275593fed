-- ARGV: P, cid, start_bid, start_seq, has_sys, sys, now, fork_base, then (chain_hash, event_json)*
-- has_sys: '1' stamp and set the system hash, '0' stamp only, 'quiet' neither (an unanswered request)
local cid, branch, seq = ARGV[2], ARGV[3], tonumber(ARGV[4])
local has_sys, sys, now, fork_base = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local conv = P .. 'conv:' .. cid
local tenant = redis.call('HGET', conv, 'tenant')
if not tenant then return {'GONE'} end
local idx = index_prefix(tenant)
local forks = 0
for i = 9, #ARGV, 2 do
  local h, payload = ARGV[i], ARGV[i + 1]
  local hit = redis.call('HGET', idx .. h, cid)
  if hit then
    local b, s = string.match(hit, '^(%S+) (%d+)$')
    branch, seq = b, tonumber(s)
  else
    local head = redis.call('HGET', bkey(branch), 'head_seq')
    if not head then return {'NOBRANCH', branch} end
    if tonumber(head) ~= seq then
      forks = forks + 1
      local child = 'b_' .. fork_base
      if forks > 1 then child = child .. '_' .. forks end
      redis.call('HSET', bkey(child), 'conversation_id', cid, 'parent_id', branch, 'fork_seq', seq,
                 'head_seq', seq, 'created_at', now, 'updated_at', now)
      redis.call('RPUSH', P .. 'conv-branches:' .. cid, child)
      own(cid, bkey(child), P .. 'events:' .. child, P .. 'chain:' .. child)
      branch = child
    end
    seq = seq + 1
    redis.call('RPUSH', P .. 'events:' .. branch, payload)
    redis.call('RPUSH', P .. 'chain:' .. branch, h)
    redis.call('HSET', idx .. h, cid, branch .. ' ' .. seq)
    redis.call('HSET', bkey(branch), 'head_seq', seq)
  end
end
if has_sys == 'quiet' then return {'OK', branch, tostring(seq)} end
if redis.call('EXISTS', bkey(branch)) == 1 then
  if has_sys == '1' then
    redis.call('HSET', bkey(branch), 'system_hash', sys, 'updated_at', now)
  else
    redis.call('HSET', bkey(branch), 'updated_at', now)
  end
end
redis.call('HSET', conv, 'updated_at', now)
redis.call('ZADD', P .. 'convs', now, cid)
return {'OK', branch, tostring(seq)}
