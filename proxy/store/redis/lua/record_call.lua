-- KEYS: the conversation's. ARGV: cid, call_id, bid ('' = none), purpose, started_at, json
if not record(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]) then return {'GONE'} end
return {'OK'}
