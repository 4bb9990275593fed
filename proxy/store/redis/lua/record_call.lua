-- KEYS: the conversation's. ARGV: cid, call_id, bid ('' = none), purpose, started_at, json
local cid, call_id, bid, purpose, started = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('ZSCORE', TOMBSTONES, cid) then return {'GONE'} end
redis.call('HSET', RECORDS, call_id, ARGV[6])
redis.call('ZADD', CALLS, started, call_id)
redis.call('ZADD', CALL_INDEX, started, cid .. '|' .. call_id)
if bid ~= '' then
  local field = bid .. '|' .. purpose
  local last = redis.call('HGET', LAST, field)
  if (not last) or tonumber(string.match(last, '^(%S+) ')) <= tonumber(started) then
    redis.call('HSET', LAST, field, started .. ' ' .. call_id)
  end
end
return {'OK'}
