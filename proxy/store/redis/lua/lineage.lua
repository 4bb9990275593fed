-- ARGV: P, bid, after_seq, limit -> flat {branch, seq, chain_hash, json, ...}
local after, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local segments = {}
local cur, upto = ARGV[2], math.huge
while cur do
  local b = redis.call('HMGET', bkey(cur), 'parent_id', 'fork_seq', 'head_seq')
  if not b[2] then break end
  table.insert(segments, {cur, tonumber(b[2]), tonumber(b[3]), upto})
  upto = tonumber(b[2])
  cur = b[1] or nil
end
local out, n = {}, 0
for i = #segments, 1, -1 do
  if n >= limit then break end
  local seg = segments[i]
  local bid, fork, head, stop = seg[1], seg[2], seg[3], seg[4]
  local first = math.max(after, fork) + 1
  local last = math.min(stop, head, first + (limit - n) - 1)
  if last >= first then
    local events = redis.call('LRANGE', P .. 'events:' .. bid, first - fork - 1, last - fork - 1)
    local hashes = redis.call('LRANGE', P .. 'chain:' .. bid, first - fork - 1, last - fork - 1)
    for j = 1, #events do
      table.insert(out, bid)
      table.insert(out, tostring(first + j - 1))
      table.insert(out, hashes[j])
      table.insert(out, events[j])
      n = n + 1
    end
  end
end
return out
