-- KEYS: the conversation's. ARGV: cid, start_bid, start_seq, has_sys, sys, now, fork_base, expect,
-- then (chain_hash, event_json)* -> {'OK', bid, seq} | {'GONE'} | {'NOBRANCH', bid} | {'STALE'}
-- (lib.lua's append)
return append(ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV, 9)
