-- sluice, shared by the Redis scripts: a bucket's stored state -> its
-- shortfall.  The one Lua copy of decide_shortfall() (src/core/decide.h)
-- and of the module's reading (src/redis_module/take.c); a script takes it
-- with a line "--@include bucket_debt.lua", which CMake replaces with this
-- text before the script's SHA-1 is computed (cmake/lua_scripts.cmake), so
-- the script stays straight-line code: no per-call closure unless the
-- script wraps it in a function itself (carry.lua, quota.lua).
--
-- The state is "<tat_us><frac:3 digits>" (sluice_state_t): tat the instant
-- the bucket is full again, frac 1/per microseconds more.  Units are 1/per
-- microsecond; every quantity is an integer below 2^53, exact in a double,
-- and so is a % b.
--
-- Reads:  s    the stored value (a string, or false/nil: no key)
--         p    the limit's per
--         now  the server's time (now.lua)
-- Sets:   D    (a local of the caller) the shortfall in units, saturated
--              at 2^53 as decide.c does; nil when s holds no live state:
--              no key, a foreign or short value (a full bucket), or a tat
--              before now.
D = nil
if s then
	local tat = tonumber(string.sub(s, 1, -4))
	if tat and tat >= now then
		-- delta*p > 2^53 - p  <=>  delta >= floor(2^53 / p).
		D = (tat - now) * p
		if D > 9007199254740992 - p then
			D = 9007199254740992
		elseif p > 1 then
			local frac = tonumber(string.sub(s, -3)) or 0
			if frac >= p then frac = p - 1 end
			D = D + frac
		end
	end
end
