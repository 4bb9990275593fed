-- KEYS: the conversation's. ARGV: bid, owner, ttl_ms -> {'OK', token} | {'HELD'} | {'NOBRANCH'}
local bid, owner, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not bget(bid, 'head') then return {'NOBRANCH'} end
local now = now_ms()
local held = redis.call('HGET', LEASES, 'lease:' .. bid)
if held then
  local who, _, expires = string.match(held, '^(.*) (%d+) (%d+)$')
  if who ~= owner and tonumber(expires) > now then return {'HELD'} end
end
local token = redis.call('HINCRBY', LEASES, 'token:' .. bid, 1)
redis.call('HSET', LEASES, 'lease:' .. bid, owner .. ' ' .. token .. ' ' .. (now + ttl))
return {'OK', tostring(token)}
