-- sluice, shared by the Redis scripts (see bucket_debt.lua): write the
-- bucket state whose shortfall at now is nd units, as decide_encode()
-- (src/core/decide.h) and the module write it.
--
-- Reads:  key  the state's key
--         nd   the shortfall to leave, in units (> 0)
--         p    the limit's per
--         now  the server's time (now.lua)
-- The state is tat = now + floor(nd / p) us and u = nd % p (1/p us),
-- "<tat><u:3 digits>": 19 digits, more than a double holds, so the
-- microseconds (< 2^53) are formatted with %d and the fraction appended.
-- It expires at PXAT = the instant it is full again (tat, or 1 us later
-- with u > 0; sluice_state_expiry_us()) rounded up to a ms: never before
-- the bucket is full.
do
	local u = 0
	if p > 1 then u = nd % p end
	local tat = now + (nd - u) / p
	local e = tat
	if u > 0 then e = e + 1 end
	local m = e % 1000
	local at = (e - m) / 1000
	if m > 0 then at = at + 1 end
	redis.call('SET', key, string.format('%d%03d', tat, u), 'PXAT', at)
end
