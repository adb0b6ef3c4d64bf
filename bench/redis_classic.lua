-- The classic Redis token bucket, as Express/Node rate-limit middleware
-- commonly ships it: a hash of two floats (tokens, ts) refilled from the
-- CLIENT's clock, written back with HMSET and kept for the refill time
-- plus an hour.  The baseline sluice's Redis store is measured against
-- (bench only; not used by sluice).
--
-- KEYS[1]  the bucket
-- ARGV     capacity, rate (tokens per second), now (client time, seconds
--          with a fraction), cost
-- Reply    {allowed, remaining tokens (floor)}
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local b = redis.call('HMGET', key, 'tokens', 'ts')
local tokens = tonumber(b[1]) or capacity
local ts = tonumber(b[2]) or now

local elapsed = math.max(0, now - ts)
tokens = math.min(capacity, tokens + elapsed * rate)

local allowed = 0
if tokens >= cost then
	tokens = tokens - cost
	allowed = 1
end

redis.call('HMSET', key, 'tokens', tokens, 'ts', now)
redis.call('EXPIRE', key, math.ceil(capacity / rate) + 3600)
return {allowed, math.floor(tokens)}
