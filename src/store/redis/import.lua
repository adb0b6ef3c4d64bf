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
-- ARGV[1]  interval, ARGV[2] tau, ARGV[3] per, ARGV[4] capacity; for a
--          calendar quota interval 0, tau the end (s) of its window
--          holding now and capacity the quota (its state end_s*10^9+used)
-- ARGV[5]  the window's length in ms (the mark's life when the counter
--          has no TTL)
-- Once per bucket and window: the mark says the import was decided
-- (kept while the counter lives), so a bucket that refilled to full (no
-- state) is not charged the same window's count again, from another
-- worker or another replica.  A bucket that holds state (sluice counted
-- it already) is never touched.  Reply: the tokens marked used (0: none).
--@include now.lua
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
c = math.floor(c)
if c > cap then c = cap end
if ni == 0 then
	-- A quota: a count in a window still open is sluice's own.  The
	-- state is written as text (end_s*10^9 exceeds a double's integers).
	local s, qe, qu = redis.call('GET', KEYS[1])
	--@include quota_state.lua
	if qe and qe > t[1] + 0 then return 0 end
	if ntau <= t[1] + 0 then return 0 end
	local key = KEYS[1]
	qe, qu = ntau, c
	--@include quota_put.lua
	return c
end
-- The shortfall as carry.lua reads it: above 0, the bucket holds state.
local key, p = KEYS[1], np
local s, D = redis.call('GET', key)
--@include bucket_debt.lua
if D and D > 0 then return 0 end
-- The count can pass the limit (envoyproxy counts refused hits too):
-- at most a bucketful is used (capped above).
local nd = c * ni
if nd > ntau then nd = ntau end
--@include bucket_put.lua
return c
