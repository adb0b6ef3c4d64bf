-- sluice, shared by the Redis scripts (see bucket_debt.lua): give a
-- charge back, the inverse of the charge on the GCRA state, as
-- sluice_refund() (src/core/decide.c) and the module's refund do.
--
-- Reads:  key   the state's key
--         s     its stored value (a string, or false/nil: no key)
--         p     the limit's per
--         back  the units to give back (cost * interval; 0: nothing)
--         now   the server's time (now.lua)
-- The shortfall D moves to D - back; at or below 0 the bucket is full
-- and the key is deleted, else the state and its PXAT are written as a
-- charge writes them.  A state that is not live (full) is left as it is.
do
	local D
	--@include bucket_debt.lua
	if D and back > 0 then
		local nd = D - back
		if nd <= 0 then
			redis.call('DEL', key)
		else
			--@include bucket_put.lua
		end
	end
end
