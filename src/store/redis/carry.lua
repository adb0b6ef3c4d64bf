-- sluice: carry a key's usage to a changed limit (sluice_carry() in
-- src/core/carry.c, which the memory, shared and module stores call; a
-- unit test replays both and requires the same states).  Read script.lua
-- first: the state, its shortfall and its writing are the same.
--
-- KEYS[1]       the key's bucket under its limit now
-- KEYS[1 + j]   its buckets under the limits it had, the most recent first
-- ARGV[1..3]    interval, tau and per of the limit now
-- ARGV[2 + 2j]  interval of earlier limit j
-- ARGV[3 + 2j]  per of earlier limit j
-- When KEYS[1] holds no state (none, or full), the first earlier bucket
-- that does is carried into it: what was used stays used -- the shortfall
-- kept exactly when the rate is the same, else the tokens used counted
-- whole (a part as one), never more than tau.  Every earlier bucket is
-- deleted, carried or not, so usage counts once.  Reply: 1 when a usage
-- was carried, else 0.  The stored format is unchanged: no fact of an
-- earlier limit is kept in Redis, the client names them.
--@include now.lua
local function shortfall(s, p)
	local D
	--@include bucket_debt.lua
	return D or 0
end
local ni, ntau, np = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0
local have = shortfall(redis.call('GET', KEYS[1]), np) > 0
local nd = 0
for j = 2, #KEYS do
	local oi, op = ARGV[2 * j] + 0, ARGV[2 * j + 1] + 0
	if not have then
		local D = shortfall(redis.call('GET', KEYS[j]), op)
		if D > 0 then
			have = true
			if oi == ni and op == np then
				nd = D
				if nd > ntau then nd = ntau end
			else
				local r = D % oi
				local used = (D - r) / oi
				if r > 0 then used = used + 1 end
				if used * ni >= ntau then
					nd = ntau
				else
					nd = used * ni
				end
			end
		end
	end
	redis.call('DEL', KEYS[j])
end
if nd == 0 then return 0 end
local key, p = KEYS[1], np
--@include bucket_put.lua
return 1
