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
-- The state's reading and writing are shared with every script
-- (lib/bucket_debt.lua, lib/bucket_put.lua, expanded in place at build
-- time: straight-line code, no closure per call).
--@include now.lua
-- ARGV comes from the client and is always numeric: Lua's arithmetic
-- coercion is cheaper than calls to tonumber.
local need, tau, p = ARGV[1] + 0, ARGV[2] + 0, 1
if ARGV[3] then p = ARGV[3] + 0 end
local key = KEYS[1]
local s, D = redis.call('GET', key)
-- A foreign or short value counts as a full bucket.
--@include bucket_debt.lua
if not D then D = 0 end
local nd = D + need
if need > 0 and nd <= tau then
	--@include bucket_put.lua
end
return D
