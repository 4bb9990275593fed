-- KEYS: the conversation's. ARGV: cid, start_bid, start_seq, has_sys, sys, now, fork_base, expect,
-- then (chain_hash, event_json)* -> {'OK', bid, seq} | {'GONE'} | {'NOBRANCH', bid} | {'STALE'}
-- has_sys: '1' stamp and set the system hash, '0' stamp only, 'quiet' neither (an unanswered
-- request): heads move, no branch's or conversation's updated_at does.
-- expect: '' for a plain append; else `extend`'s guard: the start must still be its branch's head,
-- holding the chain hash `expect`, and the first event must be new ({'STALE'}, nothing written).
local cid, br, seq = ARGV[1], ARGV[2], tonumber(ARGV[3])
local has_sys, sys, now, fork_base, expect = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local quiet = has_sys == 'quiet'
if gone(cid) then return {'GONE'} end
if expect ~= '' and (
  redis.call('HGET', CHAIN, 'h:' .. expect) ~= br .. ' ' .. seq
  or tonumber(bget(br, 'head')) ~= seq
  or redis.call('HEXISTS', CHAIN, 'h:' .. ARGV[9]) == 1
) then
  return {'STALE'}
end
local forks = 0
for i = 9, #ARGV, 2 do
  local h, payload = ARGV[i], ARGV[i + 1]
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
    local at = br .. ':' .. seq
    redis.call('HSET', EVENTS, at, payload)
    redis.call('HSET', CHAIN, at, h, 'h:' .. h, br .. ' ' .. seq)
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
