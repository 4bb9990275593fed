-- KEYS: the conversation's. ARGV: cid, before, checkpoint ids... (read from the shard's retired index)
-- -> how many retired checkpoints were deleted
local cid, before = ARGV[1], tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local member = cid .. '|' .. id
  local score = tonumber(redis.call('ZSCORE', CKS_RETIRED, member))
  if score and score < before then
    local status = ckget(id, 'status')
    if status and status ~= 'active' then
      redis.call('LREM', CKLIST, 0, id)
      redis.call('HDEL', CKS, id, id .. ':status', id .. ':gen', id .. ':covered', id .. ':branch', id .. ':created')
      n = n + 1
    end
    redis.call('ZREM', CKS_RETIRED, member)
  end
end
return n
