-- sluice: a reservation -- charge now, into debt if need be, and answer
-- how long until this request's turn (sluice_reserve_all() in
-- src/core/reserve.c; read script.lua first).  Refused, writing nothing,
-- when the turn is more than max_wait away.  The turn is the latest of
-- the limits' turns; the limit that sets it is charged as a take would
-- charge it, the others at the turn itself.  The client decides the
-- answer from the reply with the core's own code, so only the writes are
-- this script's; a unit test replays it against the core.
--
-- KEYS[i]      state of limit i of one key
-- ARGV[1]      max_wait in microseconds (<= 2^40)
-- ARGV[4i-2]   need_i = cost * interval, or tau_i + 1 when cost exceeds
--              the capacity (never)
-- ARGV[4i-1]   tau_i
-- ARGV[4i]     per_i
-- ARGV[4i+1]   max_i, the largest shortfall left (sluice_debt_max_units())
-- Reply:       {now, D_1, ..., D_n}: the server's time in microseconds and
--              each shortfall before the call.
--@include now.lua
local W = ARGV[1] + 0
local n = #KEYS
local Ds, w, out = {}, {}, {now}
local turn, never = 0, false
for i = 1, n do
	local need, tau, p = ARGV[4 * i - 2] + 0, ARGV[4 * i - 1] + 0,
		ARGV[4 * i] + 0
	local s, D = redis.call('GET', KEYS[i])
	--@include bucket_debt.lua
	local d = D or 0
	Ds[i] = d
	out[i + 1] = d
	if need > tau then
		never = true
		w[i] = -1
	else
		-- The turn in whole microseconds, rounded up.  A saturated d
		-- makes x inexact, but then far beyond any max_wait.
		local x = d + need - tau
		local wi = 0
		if x > 0 then
			local r = x % p
			wi = (x - r) / p
			if r > 0 then wi = wi + 1 end
		end
		w[i] = wi
		if wi > turn then turn = wi end
	end
end
-- cost 0 (need 0) charges nothing.
if never or turn > W or ARGV[2] + 0 == 0 then return out end
local nds = {}
for i = 1, n do
	local need, p, max = ARGV[4 * i - 2] + 0, ARGV[4 * i] + 0,
		ARGV[4 * i + 1] + 0
	local base = Ds[i]
	-- turn <= 2^40 and p <= 1000: turn * p is exact.
	if w[i] ~= turn and turn * p > base then base = turn * p end
	nds[i] = base + need
	if nds[i] > max then return out end
end
for i = 1, n do
	local key, nd, p = KEYS[i], nds[i], ARGV[4 * i] + 0
	--@include bucket_put.lua
end
return out
