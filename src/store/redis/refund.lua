-- sluice: give back what a charge of script_multi.lua took, exactly (the
-- inverse of the charge on the GCRA state).  Used in Redis Cluster, where
-- the keys of one request can live on several masters: each master is
-- charged on its own, and when another rejects, the ones that allowed get
-- their charge back.  Read script.lua first.
--
-- KEYS[i]     state of a limit the charge wrote
-- ARGV[2i-1]  need_i, as the charge was sent (cost * interval_i)
-- ARGV[2i]    per_i
-- The state moves back by need_i: D' = D - need, where D is the shortfall
-- now; D' <= 0 means the bucket is full (the key is deleted), else the
-- state and its PXAT are written as the charge writes them.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
for i = 1, #KEYS do
	local need, p = ARGV[2 * i - 1] + 0, ARGV[2 * i] + 0
	local s = redis.call('GET', KEYS[i])
	if s and need > 0 then
		local tat = tonumber(string.sub(s, 1, -4))
		if tat and tat >= now then
			local D = (tat - now) * p
			local frac = tonumber(string.sub(s, -3)) or 0
			if frac >= p then frac = p - 1 end
			local nd = D + frac - need
			if nd <= 0 then
				redis.call('DEL', KEYS[i])
			else
				local u = nd % p
				local tat = now + (nd - u) / p
				local e = tat
				if u > 0 then e = e + 1 end
				local m = e % 1000
				local at = (e - m) / 1000
				if m > 0 then at = at + 1 end
				redis.call('SET', KEYS[i],
					string.format('%d%03d', tat, u),
					'PXAT', at)
			end
		end
	end
end
return 0
