-- ARGV: P, bid, owner, token, ttl_ms -> 1 when renewed
local lease = P .. 'lease:' .. ARGV[2]
if redis.call('GET', lease) ~= ARGV[3] .. ' ' .. ARGV[4] then return 0 end
redis.call('PEXPIRE', lease, ARGV[5])
return 1
