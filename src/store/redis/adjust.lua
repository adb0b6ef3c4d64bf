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
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
for i = 1, #KEYS do
	local add, floor = ARGV[4 * i - 3] + 0, ARGV[4 * i - 2] + 0
	local max, p = ARGV[4 * i - 1] + 0, ARGV[4 * i] + 0
	local D = 0
	local s = redis.call('GET', KEYS[i])
	if s then
		local tat = tonumber(string.sub(s, 1, -4))
		if tat and tat >= now then
			D = (tat - now) * p
			if D > 9007199254740992 - p then
				D = 9007199254740992
			else
				local frac = tonumber(string.sub(s, -3)) or 0
				if frac >= p then frac = p - 1 end
				D = D + frac
			end
		end
	end
	local nd = D
	if max > D then
		if add > max - D then nd = max else nd = D + add end
		if nd < floor then nd = floor end
		if nd > max then nd = max end
	end
	if nd > D then
		local u = nd % p
		local tat = now + (nd - u) / p
		local e = tat
		if u > 0 then e = e + 1 end
		local m = e % 1000
		local at = (e - m) / 1000
		if m > 0 then at = at + 1 end
		redis.call('SET', KEYS[i],
			string.format('%d%03d', tat, u), 'PXAT', at)
	end
end
return 0
