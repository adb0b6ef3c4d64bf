-- sluice: give back what a charge of script_multi.lua took, exactly (the
-- inverse of the charge on the GCRA state).  Used in Redis Cluster, where
-- the keys of one request can live on several masters: each master is
-- charged on its own, and when another rejects, the ones that allowed get
-- their charge back.  Read script.lua first.
--
-- KEYS[i]     state of a limit the charge wrote
-- ARGV[2i-1]  need_i, as the charge was sent (cost * interval_i)
-- ARGV[2i]    per_i
-- The state moves back by need_i: D' = D - need, where D is the shortfall
-- now; D' <= 0 means the bucket is full (the key is deleted), else the
-- state and its PXAT are written as the charge writes them.
--@include now.lua
for i = 1, #KEYS do
	local back, p = ARGV[2 * i - 1] + 0, ARGV[2 * i] + 0
	local key = KEYS[i]
	local s = redis.call('GET', key)
	--@include bucket_back.lua
end
return 0
