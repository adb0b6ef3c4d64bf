-- sluice: take `cost` tokens from every limit of one key, all-or-nothing.
--
-- The same GCRA as src/core/decide.c, step for step (a unit test replays
-- random sequences through both and requires identical decisions).  All
-- quantities are integers below 2^53, so Lua's doubles are exact, and every
-- division goes through math.fmod (exact) so floors and ceilings are too.
-- Kept lean: one limit (the common case) runs straight-line code with no
-- tables or closures; integers in and out.
--
-- KEYS[i]    state of limit i: "<tat_us><frac:3 digits>" (sluice_state_t)
-- ARGV[1]    cost
-- ARGV[3i-1] interval, ARGV[3i] per, ARGV[3i+1] capacity of limit i
--            (one token every interval/per microseconds)
-- Time comes from the server (TIME), never from the client.  Each charged
-- state is written with PX = its exact time to full, rounded up to a ms.
--
-- Reply: {allowed, limit, remaining, retry_after_ms (-1: never),
--         reset_ms, which (0-based index of the most restrictive limit)}
local X = 9007199254740992 -- 2^53: decide.c saturates shortfalls here
local fmod, sub, tonumber = math.fmod, string.sub, tonumber
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cost = tonumber(ARGV[1])
local n = #KEYS

if n == 1 then
	local T, p, C = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
	local tau = C * T
	local key = KEYS[1]
	-- The shortfall D (in 1/p us units) of the stored state at `now`.
	local D = 0
	local s = redis.call('GET', key)
	if s and #s > 3 then
		local tat = tonumber(sub(s, 1, -4))
		if tat and tat >= now then
			-- delta*p > 2^53 - p  <=>  delta >= floor(2^53 / p)
			D = (tat - now) * p
			if D > X - p then
				D = X
			elseif p > 1 then
				-- (per 1, the usual case, has no fraction)
				local frac = tonumber(sub(s, -3)) or 0
				if frac >= p then frac = p - 1 end
				D = D + frac
			end
		end
	end
	if cost <= C and D + cost * T <= tau then
		if cost == 0 then
			local r, u = fmod(tau - D, T), fmod(D, p)
			local us = (D - u) / p
			if u > 0 then us = us + 1 end
			local m = fmod(us, 1000)
			if m > 0 then m = 1 end
			return {1, C, (tau - D - r) / T, 0, (us - fmod(us, 1000)) / 1000 + m, 0}
		end
		-- Allowed: the new shortfall nd <= tau, written back exactly.
		local nd = D + cost * T
		local r, u, whole = fmod(tau - nd, T), 0, nd
		local us = nd
		if p > 1 then
			u = fmod(nd, p)
			whole = (nd - u) / p
			us = whole
			if u > 0 then us = us + 1 end
		end
		local m = fmod(us, 1000)
		local ms = (us - m) / 1000
		if m > 0 then ms = ms + 1 end
		redis.call('SET', key, string.format('%d%03d', now + whole, u), 'PX', ms)
		return {1, C, (tau - nd - r) / T, 0, ms, 0}
	end
	-- Rejected: nothing written.
	local rem = 0
	if D < tau then rem = (tau - D - fmod(tau - D, T)) / T end
	local u = fmod(D, p)
	local us = (D - u) / p
	if u > 0 then us = us + 1 end
	local m = fmod(us, 1000)
	local ms = (us - m) / 1000
	if m > 0 then ms = ms + 1 end
	local retry = -1
	if cost <= C then
		-- excess = D + cost*T - tau, grouped to stay exact near 2^53
		local e = (D - tau) + cost * T
		local v = fmod(e, p)
		local rus = (e - v) / p
		if v > 0 then rus = rus + 1 end
		local w = fmod(rus, 1000)
		retry = (rus - w) / 1000
		if w > 0 then retry = retry + 1 end
	end
	return {0, C, rem, retry, ms, 0}
end

-- Several limits: evaluate all, charge all or none (sluice_eval_all).
-- The shortfall of state s (in 1/p us units) at `now`, as above.
local function shortfall(s, p)
	if not s or #s < 4 then return 0 end
	local tat = tonumber(sub(s, 1, -4))
	if not tat or tat < now then return 0 end
	local frac = tonumber(sub(s, -3)) or 0
	if frac >= p then frac = p - 1 end
	-- delta*p > 2^53 - p  <=>  delta >= floor(2^53 / p)
	local dp = (tat - now) * p
	if dp > X - p then return X end
	return dp + frac
end

local function ceil_div(a, b)
	local r = fmod(a, b)
	if r > 0 then return (a - r) / b + 1 end
	return (a - r) / b
end
local vals = redis.call('MGET', unpack(KEYS))
local ok_all = 1
local Ds, nds, al, rem, retry, reset = {}, {}, {}, {}, {}, {}
for i = 1, n do
	local T = tonumber(ARGV[3 * i - 1])
	local p = tonumber(ARGV[3 * i])
	local C = tonumber(ARGV[3 * i + 1])
	local tau = C * T
	local D = shortfall(vals[i], p)
	Ds[i] = D
	if D >= tau then rem[i] = 0 else rem[i] = (tau - D - fmod(tau - D, T)) / T end
	reset[i] = ceil_div(D, p)
	if cost > C then
		al[i], retry[i] = 0, math.huge
	else
		local excess = (D - tau) + cost * T
		if excess <= 0 then
			al[i], retry[i] = 1, 0
			if cost > 0 then
				local nd = D + cost * T
				nds[i] = nd
				rem[i] = (tau - nd - fmod(tau - nd, T)) / T
				reset[i] = ceil_div(nd, p)
			end
		else
			al[i], retry[i] = 0, ceil_div(excess, p)
		end
	end
	if al[i] == 0 then ok_all = 0 end
end

if ok_all == 1 then
	if cost > 0 then
		for i = 1, n do
			local p = tonumber(ARGV[3 * i])
			local nd = nds[i]
			local fr = fmod(nd, p)
			redis.call('SET', KEYS[i],
				string.format('%d%03d', now + (nd - fr) / p, fr),
				'PX', ceil_div(reset[i], 1000))
		end
	end
else
	-- All-or-nothing: nothing is charged; report every bucket as it is.
	for i = 1, n do
		if nds[i] then
			local T = tonumber(ARGV[3 * i - 1])
			local tau = tonumber(ARGV[3 * i + 1]) * T
			local D = Ds[i]
			if D >= tau then rem[i] = 0 else rem[i] = (tau - D - fmod(tau - D, T)) / T end
			reset[i] = ceil_div(D, tonumber(ARGV[3 * i]))
		end
		al[i] = 0
	end
end

-- The most restrictive decision (sluice_decision_merge): rejected beats
-- allowed, then the longest retry, then the fewest remaining.
local w = 1
for i = 2, n do
	local replace
	if al[i] ~= al[w] then
		replace = al[i] == 0
	elseif al[i] == 0 then
		replace = retry[i] > retry[w]
	else
		replace = rem[i] < rem[w]
	end
	if replace then w = i end
end
local r = retry[w]
if r == math.huge then r = -1 else r = ceil_div(r, 1000) end
return {ok_all, tonumber(ARGV[3 * w + 1]), rem[w], r,
	ceil_div(reset[w], 1000), w - 1}
