-- sluice: take tokens from several limits of one key, all-or-nothing
-- (sluice_eval_all).  One limit goes through script.lua, which this
-- repeats per limit; read it first.
--
-- KEYS[i]     state of limit i, <prefix>{<key>}:<limit id> (one hash tag:
--             one Cluster slot; each limit once).  sluice_redis_take_many()
--             passes the buckets of several keys, each with its own need
--             (on one server, or one slot of a cluster), each bucket once
-- ARGV[3i-2]  need_i = cost * interval_i, or tau_i + 1 when cost > capacity_i
-- ARGV[3i-1]  tau_i
-- ARGV[3i]    per_i
-- Reply: {D_1, ..., D_n}, the shortfalls before this call.  The call is
-- allowed iff D_i + need_i <= tau_i for every i; only then is any state
-- written.  The client derives the decision of each limit and the most
-- restrictive one with the core's code.
--@include now.lua
local n = #KEYS
local vals = redis.call('MGET', unpack(KEYS))
local Ds, ok = {}, true
for i = 1, n do
	local need, tau, p = ARGV[3 * i - 2] + 0, ARGV[3 * i - 1] + 0,
		ARGV[3 * i] + 0
	local s, D = vals[i]
	--@include bucket_debt.lua
	if not D then D = 0 end
	Ds[i] = D
	if D + need > tau then ok = false end
end
if ok then
	for i = 1, n do
		local need, p = ARGV[3 * i - 2] + 0, ARGV[3 * i] + 0
		if need > 0 then
			local key, nd = KEYS[i], Ds[i] + need
			--@include bucket_put.lua
		end
	end
end
return Ds
