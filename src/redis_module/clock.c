/*
 * clock.c -- the time a decision of sluice-redis.so uses (the server's
 * clock; see module.c for why and how on Redis 7.0) and, for tests only,
 * SLUICE.TESTCLOCK that fixes it.
 */
#include "redis_module/module.h"

#include "sluice.h"

static int64_t test_clock_us; /* 0: use the server clock */

int64_t sluice_rm_now_us(void)
{
	if (test_clock_us)
		return test_clock_us;
	if (RedisModule_CachedMicroseconds)
		return RedisModule_CachedMicroseconds();
	return sluice_now_us(); /* the server's clock: we are in its process */
}

int sluice_rm_testclock(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	const char *s;
	size_t len, i;
	int64_t v = 0;

	if (argc == 1)
		return RedisModule_ReplyWithLongLong(ctx, sluice_rm_now_us());
	if (argc != 2)
		return RedisModule_ReplyWithError(
			ctx, "ERR usage: SLUICE.TESTCLOCK [microseconds]");
	s = RedisModule_StringPtrLen(argv[1], &len);
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9' || i >= 18)
			return RedisModule_ReplyWithError(
				ctx,
				"ERR SLUICE.TESTCLOCK: expected microseconds "
				"since the epoch (a whole number, 0 to use "
				"the server clock)");
		v = v * 10 + (s[i] - '0');
	}
	if (len == 0)
		return RedisModule_ReplyWithError(
			ctx, "ERR SLUICE.TESTCLOCK: empty time");
	test_clock_us = v;
	return RedisModule_ReplyWithSimpleString(ctx, "OK");
}
