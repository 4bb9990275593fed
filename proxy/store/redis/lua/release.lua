-- ARGV: P, bid, owner, token
local lease = P .. 'lease:' .. ARGV[2]
if redis.call('GET', lease) == ARGV[3] .. ' ' .. ARGV[4] then redis.call('DEL', lease) end
return 1
