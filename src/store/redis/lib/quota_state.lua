-- sluice, shared by the Redis scripts (see bucket_debt.lua): a calendar
-- quota's stored state -> its window's end and its count, as the module
-- (src/redis_module/quota.c) and src/core/quota.c read it.
--
-- The state is "<end_s><used:9 digits>" (end_s * 10^9 + used), more than
-- a double holds: read as two numbers.
-- Reads:  s        the stored value (a string, or false/nil: no key)
-- Sets:   qe, qu   (locals of the caller) the window's end in seconds and
--                  the count; nil when s is no quota's state (none, too
--                  short, or not decimal).  Whether the window is still
--                  open is the caller's test.
qe, qu = nil, nil
if s and #s > 9 then
	qe = tonumber(string.sub(s, 1, -10))
	qu = tonumber(string.sub(s, -9))
end
