-- The classic token bucket in Redis, as the usual Express middleware
-- tutorial writes it: a hash per key with the token count and the time of
-- the last refill, the caller's clock (milliseconds) passed in, and an
-- EXPIRE on every call.  sluice benchmarks against it (bench/run).
--
-- KEYS[1]  the bucket
-- ARGV[1]  capacity   ARGV[2] refill rate (tokens/s)
-- ARGV[3]  now (ms, client clock)   ARGV[4] tokens requested
-- Reply: {allowed (1/0), tokens left (floored)}
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local requested = tonumber(ARGV[4])

local bucket = redis.call('HMGET', key, 'tokens', 'last_refill')
local tokens = tonumber(bucket[1])
local last = tonumber(bucket[2])
if tokens == nil then
  tokens = capacity
  last = now
end

local elapsed = math.max(0, now - last) / 1000
tokens = math.min(capacity, tokens + elapsed * rate)

local allowed = 0
if tokens >= requested then
  tokens = tokens - requested
  allowed = 1
end

redis.call('HMSET', key, 'tokens', tokens, 'last_refill', now)
redis.call('EXPIRE', key, math.ceil(capacity / rate) * 2)
return {allowed, math.floor(tokens)}
