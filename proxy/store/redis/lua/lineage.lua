-- KEYS: the conversation's. ARGV: bid, after_seq, limit -> flat {branch, seq, chain_hash, json, ...}
local after, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local segments = {}
local cur, upto = ARGV[1], math.huge
while cur do
  local parent, fork, head = branch(cur)
  if not fork then break end
  table.insert(segments, {cur, fork, head, upto})
  upto = fork
  cur = parent
end
local out, n = {}, 0
for i = #segments, 1, -1 do
  if n >= limit then break end
  local seg = segments[i]
  local bid, fork, head, stop = seg[1], seg[2], seg[3], seg[4]
  local first = math.max(after, fork) + 1
  local last = math.min(stop, head, first + (limit - n) - 1)
  for s = first, last, 500 do  -- HMGET in bounded pieces
    local fields = {}
    for q = s, math.min(last, s + 499) do table.insert(fields, bid .. ':' .. q) end
    local events = redis.call('HMGET', EVENTS, unpack(fields))
    local hashes = redis.call('HMGET', CHAIN, unpack(fields))
    for j = 1, #fields do
      table.insert(out, bid)
      table.insert(out, tostring(s + j - 1))
      table.insert(out, hashes[j])
      table.insert(out, events[j])
      n = n + 1
    end
  end
end
return out
