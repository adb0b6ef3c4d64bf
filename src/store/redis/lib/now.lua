-- sluice, shared by the Redis scripts (expanded in place of a line
-- "--@include now.lua" at build time; see bucket_debt.lua): the server's
-- clock, read once per call.  t = {seconds, microseconds} as TIME answers
-- them; now in microseconds (< 2^53: exact in a double).
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
