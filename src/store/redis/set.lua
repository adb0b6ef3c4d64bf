-- sluice: set a key's buckets to hold a given number of tokens (an
-- admin's "set"; sluice_set_remaining() in src/core/reserve.c computes
-- the shortfall, the client sends it).  Read script.lua first.
--
-- KEYS[i]      state of a limit
-- ARGV[2i-1]   D_i: the shortfall to leave, in units (0: full)
-- ARGV[2i]     per_i
-- The state becomes now + D_i, written with its PXAT as a charge writes
-- it; a full bucket is no key.
--@include now.lua
for i = 1, #KEYS do
	local key, nd, p = KEYS[i], ARGV[2 * i - 1] + 0, ARGV[2 * i] + 0
	if nd <= 0 then
		redis.call('DEL', key)
	else
		--@include bucket_put.lua
	end
end
return 0
