-- KEYS: the conversation's. ARGV: bid, owner, token
local held = redis.call('HGET', LEASES, 'lease:' .. ARGV[1])
if held then
  local who, tok = string.match(held, '^(.*) (%d+) %d+$')
  if who == ARGV[2] and tok == ARGV[3] then redis.call('HDEL', LEASES, 'lease:' .. ARGV[1]) end
end
return 1
