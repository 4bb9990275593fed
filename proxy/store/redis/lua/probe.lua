-- KEYS: the conversation's. ARGV: chain hashes, the caller's preferred (longest) first
-- -> {index, bid, seq, system_hash or '', updated_at} for the first the conversation holds, or {}
local updated = redis.call('HGET', CONV, 'updated_at')
if not updated then return {} end
for i = 1, #ARGV do
  local hit = redis.call('HGET', CHAIN, 'h:' .. ARGV[i])
  if hit then
    local b, s = string.match(hit, '^(%S+) (%d+)$')
    return {tostring(i), b, s, bget(b, 'sys') or '', updated}
  end
end
return {}
