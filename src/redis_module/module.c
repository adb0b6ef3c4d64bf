/*
 * module.c -- sluice-redis.so: loading and command registration (the
 * clock and SLUICE.TESTCLOCK are in clock.c).
 *
 *   redis-server --loadmodule /path/to/sluice-redis.so
 *
 * registers SLUICE.TAKE, SLUICE.TAKEMULTI, SLUICE.TAKEMANY,
 * SLUICE.TAKEEACH, SLUICE.RESERVE and SLUICE.REFUNDIF (see take.c).  They
 * are "write" commands (all but REFUNDIF "deny-oom") with declared key
 * positions, so Redis Cluster routes them and replicas refuse them like
 * any other write.
 *
 * Module argument STORE int|string|call chooses how states are read and
 * written (state.c): int, the default when the server's string objects are
 * laid out as the module expects (Redis 7.0 - 8.0, checked at load), else
 * call.  STORE int on another layout refuses to load.
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

/* --------------------------------------------------------------- loading */

static int bad_arg(RedisModuleCtx *ctx, RedisModuleString *arg)
{
	size_t len;
	const char *s = RedisModule_StringPtrLen(arg, &len);

	RedisModule_Log(ctx, "warning",
			"sluice: unknown module argument \"%.*s\" (the "
			"arguments are STORE int|string|call and TESTCLOCK, "
			"for tests)",
			(int)(len > 64 ? 64 : len), s);
	return REDISMODULE_ERR;
}

/* The module's arguments: *testclock, and STORE's choice in *store (-1
 * when not given).  REDISMODULE_ERR (said in the log) for an unknown
 * one. */
static int read_args(RedisModuleCtx *ctx, RedisModuleString **argv, int argc,
		     int *testclock, int *store)
{
	int i;

	for (i = 0; i < argc; i++) {
		if (sluice_rm_arg_is(argv[i], "TESTCLOCK")) {
			*testclock = 1;
		} else if (sluice_rm_arg_is(argv[i], "STORE") && i + 1 < argc) {
			i++;
			if (sluice_rm_arg_is(argv[i], "int"))
				*store = SLUICE_RM_STORE_INT;
			else if (sluice_rm_arg_is(argv[i], "string"))
				*store = SLUICE_RM_STORE_STRING;
			else if (sluice_rm_arg_is(argv[i], "call"))
				*store = SLUICE_RM_STORE_CALL;
			else
				return bad_arg(ctx, argv[i]);
		} else {
			return bad_arg(ctx, argv[i]);
		}
	}
	return REDISMODULE_OK;
}

/* The commands, with their flags and key positions (first, last, step:
 * Redis Cluster routes by them). */
static const struct {
	const char *name;
	RedisModuleCmdFunc fn;
	const char *flags;
	int first, last, step;
} commands[] = {
	/* TAKE: the key is argument 1. */
	{"sluice.take", sluice_rm_take, "write deny-oom fast", 1, 1, 1},
	/* TAKEMULTI: the keys follow numkeys, reported by the command
	 * itself (getkeys-api). */
	{"sluice.takemulti", sluice_rm_takemulti,
	 "write deny-oom fast getkeys-api", 0, 0, 0},
	/* TAKEMANY: key, capacity, rate, cost, key, ...: every 4th from 1. */
	{"sluice.takemany", sluice_rm_takemany, "write deny-oom", 1, -1, 4},
	/* TAKEEACH: capacity, rate, cost, then every argument a key. */
	{"sluice.takeeach", sluice_rm_takeeach, "write deny-oom", 4, -1, 1},
	/* CARRY: key, capacity, rate, from_key, ...: every 3rd from 1. */
	{"sluice.carry", sluice_rm_carry, "write deny-oom", 1, -1, 3},
	{"sluice.reserve", sluice_rm_reserve, "write deny-oom fast", 1, 1, 1},
	/* A refund frees memory at worst: no deny-oom. */
	{"sluice.refundif", sluice_rm_refund_if, "write fast", 1, 1, 1},
};

/* Registers commands[] (and SLUICE.TESTCLOCK with testclock):
 * REDISMODULE_ERR when the server refuses one. */
static int create_commands(RedisModuleCtx *ctx, int testclock)
{
	size_t i;

	for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (RedisModule_CreateCommand(
			    ctx, commands[i].name, commands[i].fn,
			    commands[i].flags, commands[i].first,
			    commands[i].last,
			    commands[i].step) != REDISMODULE_OK)
			return REDISMODULE_ERR;
	if (testclock) {
		if (RedisModule_CreateCommand(ctx, "sluice.testclock",
					      sluice_rm_testclock, "fast", 0, 0,
					      0) != REDISMODULE_OK)
			return REDISMODULE_ERR;
		RedisModule_Log(
			ctx, "warning",
			"sluice: TESTCLOCK loaded: SLUICE.TESTCLOCK can "
			"set the module's clock (tests only)");
	}
	return REDISMODULE_OK;
}

__attribute__((visibility("default"))) int
RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	int testclock = 0, store = -1, objects_ok;

	if (sluice_rm_api_init(ctx, MODULE_NAME, MODULE_VERSION) !=
		    REDISMODULE_OK ||
	    read_args(ctx, argv, argc, &testclock, &store) != REDISMODULE_OK)
		return REDISMODULE_ERR;
	objects_ok = sluice_rm_probe_objects();
	if (store == SLUICE_RM_STORE_INT && !objects_ok) {
		RedisModule_Log(
			ctx, "warning",
			"sluice: STORE int needs the string objects of "
			"Redis 7.0 - 8.0, and this server lays them "
			"out otherwise: use STORE string or STORE call");
		return REDISMODULE_ERR;
	}
	if (store < 0)
		store = objects_ok ? SLUICE_RM_STORE_INT : SLUICE_RM_STORE_CALL;
	sluice_rm_store = store;
	sluice_rm_prefetch_init(store == SLUICE_RM_STORE_INT);
	if (sluice_rm_state_init() != 0)
		return REDISMODULE_ERR;
	/* The module signals the keys it writes itself: a rejected take
	 * (key opened for writing, nothing written) leaves WATCH alone. */
	RedisModule_SetModuleOptions(
		ctx, REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
	if (create_commands(ctx, testclock) != REDISMODULE_OK)
		return REDISMODULE_ERR;
	RedisModule_Log(ctx, "notice",
			"sluice %s: states through %s, clock from %s, "
			"batches %s",
			SLUICE_VERSION,
			store == SLUICE_RM_STORE_INT
				? "the key API (int-encoded values)"
			: store == SLUICE_RM_STORE_STRING
				? "the key API (string values)"
				: "GET and SET (RedisModule_Call)",
			RedisModule_CachedMicroseconds
				? "RedisModule_CachedMicroseconds"
				: "CLOCK_REALTIME in microseconds (the clock "
				  "behind TIME)",
			sluice_rm_prefetch_on()
				? "prefetched (Redis 7.0 dictionaries)"
				: "not prefetched");
	return REDISMODULE_OK;
}
