-- sluice: a conditional refund -- give a reservation back only while
-- every bucket still holds the state that reservation left
-- (sluice_refund_if() in src/core/refund_if.c; read refund.lua first).
-- A take or reservation decided after it moved the state on; refunding
-- then would let one request more than the limit through, so nothing
-- is given back.  All or none: every state is checked before any write.
--
-- KEYS[i]      state of limit i of one key
-- ARGV[3i-2]   the state the reservation left, as stored (a decimal)
-- ARGV[3i-1]   back_i = min(cost, capacity) * interval_i
-- ARGV[3i]     per_i; 0 for a calendar quota (its state end_s*10^9+used,
--              back_i the count to give back)
-- Reply:       1 refunded, 0 not (a state moved on, or is gone).
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local n = #KEYS
local states = {}
for i = 1, n do
	-- Compared as strings: a state passes 2^53, a double's exact range.
	local s = redis.call('GET', KEYS[i])
	if not s or s ~= ARGV[3 * i - 2] then return 0 end
	states[i] = s
end
for i = 1, n do
	local back, p = ARGV[3 * i - 1] + 0, ARGV[3 * i] + 0
	local s = states[i]
	local tat = tonumber(string.sub(s, 1, -4))
	if p == 0 then
		-- A quota's count in a window still open goes down by back
		-- (as text: end_s*10^9 exceeds a double's integers).
		local e, used = tonumber(string.sub(s, 1, -10)),
			tonumber(string.sub(s, -9))
		if e and used and e > t[1] + 0 and back > 0 then
			local u = used - back
			if u <= 0 then
				redis.call('DEL', KEYS[i])
			else
				redis.call('SET', KEYS[i],
					string.sub(s, 1, -10) .. string.format('%09d', u),
					'PXAT', e * 1000 + math.floor((u + 999999) / 1000000))
			end
		end
	elseif tat and tat >= now and back > 0 then
		local D = (tat - now) * p
		local frac = tonumber(string.sub(s, -3)) or 0
		if frac >= p then frac = p - 1 end
		local nd = D + frac - back
		if nd <= 0 then
			redis.call('DEL', KEYS[i])
		else
			local u = nd % p
			local tat2 = now + (nd - u) / p
			local e = tat2
			if u > 0 then e = e + 1 end
			local m = e % 1000
			local at = (e - m) / 1000
			if m > 0 then at = at + 1 end
			redis.call('SET', KEYS[i],
				string.format('%d%03d', tat2, u), 'PXAT', at)
		end
	end
end
return 1
