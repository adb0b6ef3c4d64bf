-- sluice: a call whose limits include a calendar quota (sluice_quota.h):
-- a take (all-or-nothing over every limit, buckets and quotas), a refund
-- or reset, a penalty, a block or a set.  Calls of buckets alone never
-- come here (script.lua and the others, unchanged).  Read script.lua
-- first: a bucket here is decided and written exactly as there.
--
-- A quota's state is "<end_s><used:9 digits>" (end_s * 10^9 + used: the
-- end of its window in whole seconds and its count), what the module
-- stores, expiring at end_s * 1000 + ceil(used / 10^6) ms
-- (sluice_state_expiry_us() rounded up to a ms).  It counts while end_s
-- is after now; else the window is the one holding now, chosen here by
-- the server's clock.  Lua cannot compute a zoned calendar, so the client
-- sends either a fixed period (UTC units up to a week) or the boundaries
-- of the calendar windows around its own clock (the previous, current and
-- next window); a server clock outside them (the client's far off) is
-- refused, writing nothing: never allowed on a guess.  First-use windows
-- (one unit from now's second) are computed here; months and years with
-- civil date arithmetic (the end day clamped to a shorter month's last).
--
-- KEYS[i]       state of limit i (each once; one hash tag in a cluster)
-- ARGV[1]       op: 0 take, 1 refund, 2 penalize, 3 block, 4 set, 5 carry,
--               6 reserve (then ARGV[7n+2]: max_wait in microseconds)
-- ARGV[7i-5..7i+1], for limit i: kind p1 .. p6
--   kind 0, a bucket:  take: need tau per; refund: need - per;
--                      penalize and block: add floor per max; set: D - per;
--                      carry: interval tau per; reserve: need tau per max
--   kind 1, a calendar by boundaries: quota amount b0 b1 b2 b3 (seconds;
--                      windows [b0,b1) [b1,b2) [b2,b3))
--   kind 2, first use: quota amount unit (SLUICE_PER_*)
--   kind 3, a fixed period: quota amount length_s offset_s (windows start
--                      at offset + k * length)
--   amount: take the cost (at most quota + 1), refund the count (-1: a
--   reset), penalize the cost, block 1 (0: nothing), set the remaining.
-- A carry (sluice_carry(), as carry.lua and SLUICE.CARRY): KEYS[1] is the
-- key under its limit now, KEYS[2..] under its earlier limits, the most
-- recent first.  When KEYS[1] holds nothing live, the first earlier state
-- that does is carried in whole requests (a bucket's shortfall in whole
-- tokens, a partly refilled one counting as used; a quota's count): to a
-- quota, the count of its current window, to a bucket that many tokens
-- short of full, at most the limit; between two buckets as carry.lua.
-- Every earlier key is deleted, carried or not.  Reply 1 or 0.
-- Reply: {now_us, r_1, ..., r_n}: r_i a bucket's shortfall before the
-- call; a quota's {end_s, used} before the call (its live window, or the
-- window now opens, used 0).  {-1, i}: limit i's window could not be
-- placed (the client's clock is far from the server's); nothing written.
--@include now.lua
local now_s = t[1] + 0
local op = ARGV[1] + 0
local n = #KEYS
local MAX = 999999999

-- A bucket's shortfall and writing (lib/bucket_debt.lua, lib/bucket_put.lua).
local function shortfall(s, p)
	local D
	--@include bucket_debt.lua
	return D or 0
end

local function put_bucket(key, nd, p)
	--@include bucket_put.lua
end

-- Days since 1970-01-01 of a civil date, and back (H. Hinnant's
-- algorithms; y, m, d integers, m 1..12).
local function days_from_civil(y, m, d)
	if m <= 2 then y = y - 1 end
	local era = math.floor(y / 400)
	local yoe = y - era * 400
	local mp = (m + 9) % 12
	local doy = math.floor((153 * mp + 2) / 5) + d - 1
	local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) +
		doy
	return era * 146097 + doe - 719468
end

local function civil_from_days(z)
	z = z + 719468
	local era = math.floor(z / 146097)
	local doe = z - era * 146097
	local yoe = math.floor((doe - math.floor(doe / 1460) +
		math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
	local y = yoe + era * 400
	local doy = doe - (365 * yoe + math.floor(yoe / 4) -
		math.floor(yoe / 100))
	local mp = math.floor((5 * doy + 2) / 153)
	local d = doy - math.floor((153 * mp + 2) / 5) + 1
	local m = mp + 3
	if m > 12 then m = m - 12 end
	if m <= 2 then y = y + 1 end
	return y, m, d
end

local function month_days(y, m)
	if m == 2 then
		if (y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0 then
			return 29
		end
		return 28
	end
	if m == 4 or m == 6 or m == 9 or m == 11 then return 30 end
	return 31
end

local LEN = {1, 60, 3600, 86400, 604800}

-- The end of the first-use window opening at now's second.
local function first_use_end(unit)
	if unit <= 5 then return now_s + LEN[unit] end
	local sec = now_s % 86400
	local y, m, d = civil_from_days((now_s - sec) / 86400)
	if unit == 6 then
		m = m + 1
		if m > 12 then m, y = 1, y + 1 end
	else
		y = y + 1
	end
	local md = month_days(y, m)
	if d > md then d = md end
	return days_from_civil(y, m, d) * 86400 + sec
end

-- The end of the window a quota with no live state counts in, or nil.
local function window_end(b)
	local kind = ARGV[b] + 0
	if kind == 2 then return first_use_end(ARGV[b + 3] + 0) end
	if kind == 3 then
		local len, off = ARGV[b + 3] + 0, ARGV[b + 4] + 0
		return now_s - (now_s - off) % len + len
	end
	for j = b + 3, b + 5 do
		if ARGV[j] + 0 <= now_s and now_s < ARGV[j + 1] + 0 then
			return ARGV[j + 1] + 0
		end
	end
	return nil
end

-- A quota's count in its live window and that window's end (0, nil:
-- none; a value too short to be a quota's counts as none).
local function live(s)
	local qe, qu
	--@include quota_state.lua
	if qe and qu and qe * 1000000 > now and qu > 0 then
		return qu, qe
	end
	return 0, nil
end

local function put_quota(key, qe, qu)
	--@include quota_put.lua
end

local vals = redis.call('MGET', unpack(KEYS))

if op == 5 then
	local kind1, e = ARGV[2] + 0, nil
	local have
	if kind1 == 0 then
		have = shortfall(vals[1], ARGV[5] + 0) > 0
	else
		have = live(vals[1]) > 0
		if not have then
			e = window_end(2)
			if not e then return {-1, 1} end
		end
	end
	local carried = 0
	for j = 2, n do
		local b = 7 * j - 5
		local kind = ARGV[b] + 0
		if not have then
			local D, used = 0, 0
			if kind == 0 then
				D = shortfall(vals[j], ARGV[b + 3] + 0)
				local oi = ARGV[b + 1] + 0
				local r = D % oi
				used = (D - r) / oi
				if r > 0 then used = used + 1 end
			else
				used = live(vals[j])
			end
			if used > 0 then
				have, carried = true, 1
				if kind1 ~= 0 then
					local q = ARGV[3] + 0
					if used > q then used = q end
					put_quota(KEYS[1], e, used)
				else
					local ni, ntau = ARGV[3] + 0, ARGV[4] + 0
					local np, nd = ARGV[5] + 0, 0
					if kind == 0 and ARGV[b + 1] + 0 == ni and
						ARGV[b + 3] + 0 == np then
						nd = D
						if nd > ntau then nd = ntau end
					elseif used * ni >= ntau then
						nd = ntau
					else
						nd = used * ni
					end
					put_bucket(KEYS[1], nd, np)
				end
			end
		end
		redis.call('DEL', KEYS[j])
	end
	return carried
end

local out, ok = {now}, true
local ends, used = {}, {}
for i = 1, n do
	local b = 7 * i - 5
	local kind, s = ARGV[b] + 0, vals[i]
	if kind == 0 then
		local p = ARGV[b + 3] + 0
		local D = shortfall(s, p)
		out[i + 1] = D
		if op == 0 and D + ARGV[b + 1] > ARGV[b + 2] + 0 then
			ok = false
		end
	else
		local u, e = live(s)
		if not e and op == 1 then
			-- A refund or reset of a window that is over: nothing
			-- to place (a reset still deletes the key).
			e = 0
		elseif not e then
			e = window_end(b)
			if not e then return {-1, i} end
		end
		ends[i], used[i] = e, u
		out[i + 1] = {e, u}
		if op == 0 and u + ARGV[b + 2] > ARGV[b + 1] + 0 then
			ok = false
		end
	end
end
if op == 6 then
	-- A reservation (sluice_reserve_all(), reserve.lua's rule for the
	-- buckets): the turn is the latest limit's wait; a quota passes now
	-- or not at all, and a turn at or past its window's end is refused.
	-- The limit that sets the turn is charged as a take would, the
	-- other buckets at the turn; nothing is written when refused.
	local maxw = ARGV[7 * n + 2] + 0
	local turn, never, qwait = 0, false, 0
	local w, left, nd = {}, {}, {}
	for i = 1, n do
		local b = 7 * i - 5
		local a1, a2 = ARGV[b + 1] + 0, ARGV[b + 2] + 0
		if ARGV[b] + 0 == 0 then
			local p = ARGV[b + 3] + 0
			local x = out[i + 1] + a1
			if a1 > a2 then
				never, w[i] = true, math.huge
			elseif x <= a2 then
				w[i] = 0
			else
				local r = (x - a2) % p
				w[i] = (x - a2 - r) / p
				if r > 0 then w[i] = w[i] + 1 end
			end
		else
			left[i] = ends[i] * 1000000 - now
			if a2 > a1 then
				never, w[i] = true, math.huge
			elseif used[i] + a2 <= a1 then
				w[i] = 0
			else
				w[i] = left[i]
				qwait = left[i]
			end
		end
		if w[i] > turn then turn = w[i] end
	end
	local rok = not never and turn <= maxw and qwait == 0
	for i = 1, n do
		if left[i] and turn >= left[i] and not never then rok = false end
	end
	for i = 1, n do
		local b = 7 * i - 5
		local a1 = ARGV[b + 1] + 0
		if ARGV[b] + 0 == 0 then
			local p, D = ARGV[b + 3] + 0, out[i + 1]
			local base = D
			if w[i] ~= turn and turn * p > base then base = turn * p end
			nd[i] = base + a1
			if a1 > 0 and nd[i] > ARGV[b + 4] + 0 then rok = false end
		else
			nd[i] = used[i] + ARGV[b + 2]
		end
	end
	if not rok then return out end
	for i = 1, n do
		local b = 7 * i - 5
		if ARGV[b] + 0 == 0 then
			if nd[i] ~= out[i + 1] then
				put_bucket(KEYS[i], nd[i], ARGV[b + 3] + 0)
			end
		elseif nd[i] ~= used[i] then
			put_quota(KEYS[i], ends[i], nd[i])
		end
	end
	return out
end

if not ok then return out end

for i = 1, n do
	local b = 7 * i - 5
	local key = KEYS[i]
	if ARGV[b] + 0 == 0 then
		local D, p = out[i + 1], ARGV[b + 3] + 0
		local a1, a2 = ARGV[b + 1] + 0, ARGV[b + 2] + 0
		if op == 0 then
			if a1 > 0 then put_bucket(key, D + a1, p) end
		elseif op == 1 then
			if vals[i] and a1 > 0 and D > 0 then
				if D <= a1 then
					redis.call('DEL', key)
				else
					put_bucket(key, D - a1, p)
				end
			end
		elseif op == 4 then
			if a1 <= 0 then
				redis.call('DEL', key)
			else
				put_bucket(key, a1, p)
			end
		else
			local max, nd = ARGV[b + 4] + 0, D
			if max > D then
				if a1 > max - D then nd = max else nd = D + a1 end
				if nd < a2 then nd = a2 end
				if nd > max then nd = max end
			end
			if nd > D then put_bucket(key, nd, p) end
		end
	else
		local q, a = ARGV[b + 1] + 0, ARGV[b + 2] + 0
		local u, nu = used[i], used[i]
		if op == 0 then
			nu = u + a
		elseif op == 1 then
			if a < 0 then nu = 0 elseif a >= u then nu = 0 else
				nu = u - a
			end
		elseif op == 2 then
			nu = u + a
			if nu > MAX then nu = MAX end
		elseif op == 3 then
			if a > 0 and u < q then nu = q end
		else
			if a >= q then nu = 0 else nu = q - a end
		end
		if nu == 0 then
			if vals[i] and (u > 0 or op == 1) then
				redis.call('DEL', key)
			end
		elseif nu ~= u then
			put_quota(key, ends[i], nu)
		end
	end
end
return out
