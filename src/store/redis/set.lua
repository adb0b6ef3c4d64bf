-- sluice: set a key's buckets to hold a given number of tokens (an
-- admin's "set"; sluice_set_remaining() in src/core/reserve.c computes
-- the shortfall, the client sends it).  Read script.lua first.
--
-- KEYS[i]      state of a limit
-- ARGV[2i-1]   D_i: the shortfall to leave, in units (0: full)
-- ARGV[2i]     per_i
-- The state becomes now + D_i, written with its PXAT as a charge writes
-- it; a full bucket is no key.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
for i = 1, #KEYS do
	local nd, p = ARGV[2 * i - 1] + 0, ARGV[2 * i] + 0
	if nd <= 0 then
		redis.call('DEL', KEYS[i])
	else
		local u = nd % p
		local tat = now + (nd - u) / p
		local e = tat
		if u > 0 then e = e + 1 end
		local m = e % 1000
		local at = (e - m) / 1000
		if m > 0 then at = at + 1 end
		redis.call('SET', KEYS[i], string.format('%d%03d', tat, u),
			'PXAT', at)
	end
end
return 0
