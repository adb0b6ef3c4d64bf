/*
 * module.c -- sluice-redis.so: loading, command registration and the clock.
 *
 *   redis-server --loadmodule /path/to/sluice-redis.so
 *
 * registers SLUICE.TAKE and SLUICE.TAKEMULTI (see take.c).  Both are
 * "write deny-oom fast" commands with declared key positions, so Redis
 * Cluster routes them and replicas refuse them like any other write.
 *
 * The clock is the server's, never the client's: RedisModule_CachedMicroseconds
 * (Redis 7.2+: the time cached before the command ran) where the server has
 * it.  Redis 7.0 offers modules only RedisModule_Milliseconds(), whole
 * milliseconds, while the script path reads TIME in microseconds: a bucket
 * handed from script to module within one millisecond would look up to
 * 1 ms less refilled, one token short right after a take.  So on 7.0 the
 * module reads the same clock in microseconds itself: it runs inside the
 * server process, and CLOCK_REALTIME there is exactly the clock behind
 * TIME, mstime() and RedisModule_Milliseconds().
 *
 * Test only: loading with the argument TESTCLOCK
 *
 *   redis-server --loadmodule sluice-redis.so TESTCLOCK
 *
 * also registers SLUICE.TESTCLOCK [us]: with an argument it fixes the
 * module's clock at that many microseconds since the epoch (0 returns to the
 * server clock); without one it replies with the module's current time.  It
 * lets tests replay exact, microsecond-precise sequences.  Never load a
 * production server with TESTCLOCK.
 */
#include "redis_module/module.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sluice.h"

#define MODULE_NAME    "sluice"
#define MODULE_VERSION 100 /* 0.1.0 */

/* ---------------------------------------------------------------- clock */

static int64_t test_clock_us; /* 0: use the server clock */

int64_t sluice_rm_now_us(void)
{
	if (test_clock_us)
		return test_clock_us;
	if (RedisModule_CachedMicroseconds)
		return RedisModule_CachedMicroseconds();
	return sluice_now_us(); /* the server's clock: we are in its process */
}

static int testclock_cmd(RedisModuleCtx *ctx, RedisModuleString **argv,
			 int argc)
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

/* --------------------------------------------------------------- loading */

int sluice_rm_arg_is(RedisModuleString *arg, const char *word)
{
	size_t len;
	const char *s = RedisModule_StringPtrLen(arg, &len);

	return len == strlen(word) && strncasecmp(s, word, len) == 0;
}

__attribute__((visibility("default"))) int
RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	int testclock = 0, i;

	if (sluice_rm_api_init(ctx, MODULE_NAME, MODULE_VERSION) !=
	    REDISMODULE_OK)
		return REDISMODULE_ERR;
	for (i = 0; i < argc; i++) {
		if (sluice_rm_arg_is(argv[i], "TESTCLOCK")) {
			testclock = 1;
		} else {
			size_t len;
			const char *s = RedisModule_StringPtrLen(argv[i], &len);

			RedisModule_Log(ctx, "warning",
					"sluice: unknown module argument "
					"\"%.*s\" (the only one is TESTCLOCK, "
					"for tests)",
					(int)(len > 64 ? 64 : len), s);
			return REDISMODULE_ERR;
		}
	}
	/* TAKE: the key is argument 1.  TAKEMULTI: the keys follow numkeys,
	 * reported by the command itself (getkeys-api). */
	if (RedisModule_CreateCommand(ctx, "sluice.take", sluice_rm_take,
				      "write deny-oom fast", 1, 1,
				      1) != REDISMODULE_OK)
		return REDISMODULE_ERR;
	if (RedisModule_CreateCommand(ctx, "sluice.takemulti",
				      sluice_rm_takemulti,
				      "write deny-oom fast getkeys-api", 0, 0,
				      0) != REDISMODULE_OK)
		return REDISMODULE_ERR;
	if (testclock) {
		if (RedisModule_CreateCommand(ctx, "sluice.testclock",
					      testclock_cmd, "fast", 0, 0,
					      0) != REDISMODULE_OK)
			return REDISMODULE_ERR;
		RedisModule_Log(
			ctx, "warning",
			"sluice: TESTCLOCK loaded: SLUICE.TESTCLOCK can "
			"set the module's clock (tests only)");
	}
	RedisModule_Log(ctx, "notice", "sluice %s: clock from %s",
			SLUICE_VERSION,
			RedisModule_CachedMicroseconds
				? "RedisModule_CachedMicroseconds"
				: "CLOCK_REALTIME in microseconds (the clock "
				  "behind TIME)");
	return REDISMODULE_OK;
}
