-- KEYS: the conversation's. ARGV: bid, owner, token, ttl_ms -> 1 when renewed
local bid, owner, token = ARGV[1], ARGV[2], ARGV[3]
local held = redis.call('HGET', LEASES, 'lease:' .. bid)
if not held then return 0 end
local who, tok, expires = string.match(held, '^(.*) (%d+) (%d+)$')
local now = now_ms()
if who ~= owner or tok ~= token or tonumber(expires) <= now then return 0 end
redis.call('HSET', LEASES, 'lease:' .. bid, owner .. ' ' .. token .. ' ' .. (now + tonumber(ARGV[4])))
return 1
