-- sluice: take `cost` tokens from every limit of one key, all-or-nothing.
--
-- The same GCRA as src/core/decide.c, step for step (a unit test replays
-- random sequences through both and requires identical decisions).  All
-- quantities are integers below 2^53, so Lua's doubles are exact; divisions
-- go through math.fmod (exact) so floors and ceilings are exact too.
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
local fmod, tonumber = math.fmod, tonumber
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cost = tonumber(ARGV[1])
local n = #KEYS
local vals
if n == 1 then
	vals = {redis.call('GET', KEYS[1])}
else
	vals = redis.call('MGET', unpack(KEYS))
end

local function ceil_div(a, b)
	local r = fmod(a, b)
	if r > 0 then return (a - r) / b + 1 end
	return (a - r) / b
end

-- Per limit: D (shortfall in 1/per us units), decision fields.
local ok_all = 1
local Ds, nds = {}, {}
local al, rem, retry, reset = {}, {}, {}, {}
for i = 1, n do
	local T = tonumber(ARGV[3 * i - 1])
	local p = tonumber(ARGV[3 * i])
	local C = tonumber(ARGV[3 * i + 1])
	local tau = C * T
	local D = 0
	local s = vals[i]
	if s and #s > 3 then
		local tat = tonumber(s:sub(1, -4))
		if tat and tat >= now then
			local frac = tonumber(s:sub(-3)) or 0
			if frac >= p then frac = p - 1 end
			-- delta*p > 2^53 - p  <=>  delta >= floor(2^53 / p)
			local dp = (tat - now) * p
			if dp > X - p then D = X else D = dp + frac end
		end
	end
	Ds[i] = D
	if D >= tau then rem[i] = 0 else rem[i] = (tau - D - fmod(tau - D, T)) / T end
	reset[i] = ceil_div(D, p)
	if cost > C then
		al[i], retry[i] = 0, math.huge
	else
		local need = cost * T
		local excess = (D - tau) + need
		if excess <= 0 then
			al[i], retry[i] = 1, 0
			if cost > 0 then
				local nd = D + need
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
		if al[i] == 1 and nds[i] then
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
