-- An answered call's record, then its response turn (Store.record_answered). KEYS: the
-- conversation's. ARGV: record_call.lua's six, then append.lua's whole ARGV (its cid again) ->
-- {'GONE'} (the record refused, nothing written) | {'OK', <append.lua's reply>...} (the record
-- stored, whatever the append answered)
local cid = ARGV[1]
if not record(cid, ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]) then return {'GONE'} end
local turn = append(cid, ARGV[8], tonumber(ARGV[9]), ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV, 15)
table.insert(turn, 1, 'OK')
return turn
