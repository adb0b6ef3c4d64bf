-- sluice, shared by the Redis scripts (see bucket_debt.lua): write a
-- calendar quota's state, as the module writes it.
--
-- Reads:  key  the state's key
--         qe   the end of its window, in seconds
--         qu   the count in it (1 .. 999999999)
-- The state "<end_s><used:9 digits>" expires at end_s * 1000 +
-- ceil(used / 10^6) ms (sluice_state_expiry_us() rounded up to a ms).
redis.call('SET', key, string.format('%d%09d', qe, qu), 'PXAT',
	qe * 1000 + math.ceil(qu / 1000000))
