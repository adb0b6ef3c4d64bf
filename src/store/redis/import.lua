-- sluice: start a bucket with the usage envoyproxy/ratelimit counted for
-- the same descriptor (envoy.import_counters: a cutover that resets
-- nobody).  Read script.lua first: the state, its shortfall and its
-- writing are the same, written as set.lua writes a shortfall, so the
-- script store and the module read it alike.
--
-- KEYS[1]  the bucket's state, <prefix>{<key>}:<limit id>
-- KEYS[2]  envoyproxy/ratelimit's fixed-window counter for the descriptor
--          and this window (CACHE_KEY_PREFIX domain_k_v_..._windowstart):
--          a plain integer its INCRBY counts, over-limit hits included
-- KEYS[3]  the bucket's import mark, <KEYS[1]>#import
-- ARGV[1]  interval, ARGV[2] tau, ARGV[3] per, ARGV[4] capacity
-- ARGV[5]  the window's length in ms (the mark's life when the counter
--          has no TTL)
-- Once per bucket and window: the mark says the import was decided
-- (kept while the counter lives), so a bucket that refilled to full (no
-- state) is not charged the same window's count again, from another
-- worker or another replica.  A bucket that holds state (sluice counted
-- it already) is never touched.  Reply: the tokens marked used (0: none).
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
-- Anything but an integer string (no key, another type, text) is no
-- count: nothing to import, and no error that would fail every request.
local v = redis.pcall('GET', KEYS[2])
if type(v) ~= 'string' then return 0 end
local c = tonumber(v)
if not c or c ~= c or c < 1 then return 0 end
local ttl = redis.call('PTTL', KEYS[2])
if ttl < 1 then ttl = ARGV[5] + 0 end
redis.call('SET', KEYS[3], '1', 'PX', ttl)
local ni, ntau, np, cap = ARGV[1] + 0, ARGV[2] + 0, ARGV[3] + 0, ARGV[4] + 0
-- The shortfall as carry.lua reads it: above 0, the bucket holds state.
local s = redis.call('GET', KEYS[1])
if s then
	local tat = tonumber(string.sub(s, 1, -4))
	if tat and tat >= now then
		local D = (tat - now) * np
		if np > 1 then D = D + (tonumber(string.sub(s, -3)) or 0) end
		if D > 0 then return 0 end
	end
end
-- The count can pass the limit (envoyproxy counts refused hits too):
-- at most a bucketful is used.
c = math.floor(c)
if c > cap then c = cap end
local nd = c * ni
if nd > ntau then nd = ntau end
local u = nd % np
local tat = now + (nd - u) / np
local e = tat
if u > 0 then e = e + 1 end
local m = e % 1000
local at = (e - m) / 1000
if m > 0 then at = at + 1 end
redis.call('SET', KEYS[1], string.format('%d%03d', tat, u), 'PXAT', at)
return c
