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
--@include now.lua
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
	local key, s = KEYS[i], states[i]
	if p == 0 then
		-- A quota's count in a window still open goes down by back.
		local qe, qu
		--@include quota_state.lua
		if qe and qu and qe > t[1] + 0 and back > 0 then
			qu = qu - back
			if qu <= 0 then
				redis.call('DEL', key)
			else
				--@include quota_put.lua
			end
		end
	else
		--@include bucket_back.lua
	end
end
return 1
