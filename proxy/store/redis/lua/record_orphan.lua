-- A call no conversation owns. KEYS: its shard's orphan-calls hash, call-index, tombstones.
-- ARGV: call_id, started_at, json
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], '|' .. ARGV[1])
return {'OK'}
