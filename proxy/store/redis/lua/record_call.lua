-- ARGV: P, call_id, cid ('' = none), bid ('' = none), last_call_key, started_at, json
local call_id, cid, bid, last_key, started, payload = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if cid ~= '' and redis.call('ZSCORE', P .. 'tombstones', cid) then return {'GONE'} end
local key = P .. 'call:' .. call_id
redis.call('SET', key, payload)
redis.call('ZADD', P .. 'calls', started, call_id)
if cid ~= '' then
  redis.call('ZADD', P .. 'conv-calls:' .. cid, started, call_id)
  own(cid, key, P .. 'conv-calls:' .. cid)
end
if bid ~= '' then
  redis.call('ZADD', last_key, started, call_id)
  if cid ~= '' then own(cid, last_key) end
end
return {'OK'}
