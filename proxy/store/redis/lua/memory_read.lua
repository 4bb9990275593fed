-- KEYS[1] the tag's records hash, KEYS[2..] scope sets of one tenant -> the records' JSON.
local ids = redis.call('SUNION', unpack(KEYS, 2))
if #ids == 0 then return {} end
local out = {}
for _, json in ipairs(redis.call('HMGET', KEYS[1], unpack(ids))) do
  if json then table.insert(out, json) end
end
return out
