-- sluice: take tokens from one limit of one key (the common case; several
-- limits go through script_multi.lua).
--
-- The script does only what must happen inside Redis: read the state at the
-- server's time (TIME), decide, write the new state.  It answers the one
-- number the decision depends on, the bucket's shortfall D; the client
-- derives allowed, remaining, retry and reset from D with the core's own
-- code (src/store/redis/script.c), so the two cannot drift apart.  Redis
-- CPU is what this saves: a table reply, per-call tables and closures each
-- cost more than all of the arithmetic here (docs/REDIS.md, figures).
--
-- Units are 1/per microsecond, as in src/core/decide.c.  All quantities are
-- integers below 2^53, so Lua's doubles hold them exactly, and so does
-- a % b (Lua computes a - floor(a/b)*b): for 0 <= a < 2^53 the rounded
-- quotient a/b errs by less than 1/b, so its floor is exact.  `%` is an
-- operator, cheaper than a call to math.fmod.  A unit test replays random
-- sequences through this script and the core and requires identical
-- shortfalls, decisions, states and TTLs.
--
-- KEYS[1]  <prefix>{<key>}:<limit id>, holding the state
--          "<tat_us><frac:3 digits>" (sluice_state_t)
-- ARGV[1]  need = cost * interval, or tau + 1 when cost > capacity
-- ARGV[2]  tau = capacity * interval (time from empty to full, in units)
-- ARGV[3]  per, left out when 1 (one argument fewer to convert)
-- Reply:   D, the shortfall (units) before this call, <= 2^53.  Allowed
--          iff D + need <= tau; then the state moves to now + D + need,
--          written with PXAT = the instant it is full again
--          (sluice_state_expiry_us()) rounded up to a ms, as the module
--          writes it: never before the bucket is full.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
-- ARGV comes from the client and is always numeric: Lua's arithmetic
-- coercion is cheaper than calls to tonumber.
local need, tau, p = ARGV[1] + 0, ARGV[2] + 0, 1
if ARGV[3] then p = ARGV[3] + 0 end
local D = 0
local s = redis.call('GET', KEYS[1])
if s then
	-- tonumber: a foreign or short value counts as a full bucket.
	local tat = tonumber(string.sub(s, 1, -4))
	if tat and tat >= now then
		-- Saturate as decide.c does: delta*p > 2^53 - p  <=>
		-- delta >= floor(2^53 / p).
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
local nd = D + need
if need > 0 and nd <= tau then
	-- The new state: tat = now + floor(nd / p) us and u = nd % p
	-- (1/p us); full at tat, or 1 us later with u > 0.  The state has 19
	-- digits, more than a double holds: format the microseconds (< 2^53)
	-- with %d and append the fraction.
	local u = 0
	if p > 1 then u = nd % p end
	local tat = now + (nd - u) / p
	local e = tat
	if u > 0 then e = e + 1 end
	local m = e % 1000
	local at = (e - m) / 1000
	if m > 0 then at = at + 1 end
	redis.call('SET', KEYS[1], string.format('%d%03d', tat, u),
		'PXAT', at)
end
return D
