-- sluice: move states forward without a check -- a penalty (a charge that
-- always applies, possibly into debt) or a block (no take passes until a
-- given time).  The inverse direction of refund.lua; the same arithmetic
-- as sluice_penalize() and sluice_block() in src/core/decide.c, which the
-- client uses to compute the arguments.  Read script.lua first.
--
-- KEYS[i]     state of a limit
-- ARGV[4i-3]  add_i: units to add to the shortfall (cost * interval, or 0)
-- ARGV[4i-2]  floor_i: the shortfall to raise it to at least (or 0)
-- ARGV[4i-1]  max_i: the largest shortfall to leave (< 2^53)
-- ARGV[4i]    per_i
-- The shortfall D now moves to min(max(D + add, floor), max); when that is
-- more than D, the state and its PXAT are written as a charge writes them.
--@include now.lua
for i = 1, #KEYS do
	local add, floor = ARGV[4 * i - 3] + 0, ARGV[4 * i - 2] + 0
	local max, p = ARGV[4 * i - 1] + 0, ARGV[4 * i] + 0
	local key = KEYS[i]
	local s, D = redis.call('GET', key)
	--@include bucket_debt.lua
	if not D then D = 0 end
	local nd = D
	if max > D then
		if add > max - D then nd = max else nd = D + add end
		if nd < floor then nd = floor end
		if nd > max then nd = max end
	end
	if nd > D then
		--@include bucket_put.lua
	end
end
return 0
