/*
 * take.c -- SLUICE.TAKE and SLUICE.TAKEMULTI.
 *
 *   SLUICE.TAKE key capacity rate [COST n]
 *   SLUICE.TAKEMULTI numkeys key [key ...] capacity rate [capacity rate ...]
 *                    [COST n]
 *
 * reply with an array of integers
 *
 *   [allowed, limit, remaining, retry_after_ms, reset_ms]           (TAKE)
 *   [allowed, limit, remaining, retry_after_ms, reset_ms, which]    (MULTI)
 *
 * allowed is 1 or 0; limit the capacity; remaining the whole tokens left;
 * retry_after_ms the time until this cost could pass (0 when allowed, -1
 * when the cost exceeds the capacity and can never pass); reset_ms the time
 * until the bucket is full again.  Both times are the decision's microsecond
 * values rounded up to whole milliseconds.  TAKEMULTI charges every key its
 * own limit, all-or-nothing, and reports the most restrictive limit; which
 * is its 0-based index.  COST defaults to 1; COST 0 peeks.
 *
 * The decision is sluice_eval_all() from libsluice, the same code as every
 * other path.  The state of a key is the bucket's sluice_state_t stored as a
 * plain string holding the decimal integer, with an expiry at the instant
 * the bucket is full again (sluice_state_expiry_us(), rounded up to a whole
 * millisecond): the value the Redis script path writes, with an expiry
 * that, like the script's, never comes before the bucket is full, so the
 * module and the script can serve the same keys.  Writing goes through the
 * server's own SET, so the value is int-encoded like any SET of a number,
 * and the write is replicated as its effect,
 * `SET key state PXAT ms` (several keys: inside MULTI/EXEC), never as the
 * clock-dependent command itself.  A rejected request or a peek writes
 * nothing.
 */
#include "redis_module/module.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sluice.h"
#include "util/num.h"

/* The most keys one TAKEMULTI accepts: one per limit of a call. */
#define MAX_KEYS SLUICE_MAX_LIMITS

#define TAKE_USAGE "SLUICE.TAKE key capacity rate [COST n]"
#define MULTI_USAGE                                                            \
	"SLUICE.TAKEMULTI numkeys key [key ...] capacity rate "                \
	"[capacity rate ...] [COST n]"

/* Longest piece of user input quoted back in an error message. */
#define QUOTE_MAX 64

/* ------------------------------------------------------------ arguments */

static int reply_errorf(RedisModuleCtx *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int reply_errorf(RedisModuleCtx *ctx, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return RedisModule_ReplyWithError(ctx, msg);
}

/* The argument as a C string, or NULL when it holds a NUL byte (the server
 * keeps arguments NUL-terminated, so the pointer can be used as is). */
static const char *arg_cstr(RedisModuleString *arg)
{
	size_t len;
	const char *s = RedisModule_StringPtrLen(arg, &len);

	return strlen(s) == len ? s : NULL;
}

/* A whole number 0 .. max in plain decimal digits; -1 when the text is
 * not one, -2 when it is larger than max. */
static int parse_count(RedisModuleString *arg, uint64_t max, uint64_t *out)
{
	size_t len, i;
	const char *s = RedisModule_StringPtrLen(arg, &len);
	uint64_t v = 0;

	if (len == 0)
		return -1;
	for (i = 0; i < len; i++) {
		unsigned dgt = (unsigned)(s[i] - '0');

		if (s[i] < '0' || s[i] > '9')
			return -1;
		if (v > (UINT64_MAX - dgt) / 10)
			return -2;
		v = v * 10 + dgt;
	}
	if (v > max)
		return -2;
	*out = v;
	return 0;
}

/* Parses "COST n" at argv[i]; replies with the error and returns -1 on
 * bad input. */
static int parse_cost(RedisModuleCtx *ctx, RedisModuleString **argv, int i,
		      uint64_t *cost)
{
	size_t len;
	const char *s;
	int rc;

	if (!sluice_rm_arg_is(argv[i], "COST")) {
		s = RedisModule_StringPtrLen(argv[i], &len);
		reply_errorf(ctx,
			     "ERR unknown option \"%.*s\": the only option is "
			     "COST n",
			     (int)(len > QUOTE_MAX ? QUOTE_MAX : len), s);
		return -1;
	}
	rc = parse_count(argv[i + 1], SLUICE_UNITS_MAX, cost);
	if (rc == 0)
		return 0;
	s = RedisModule_StringPtrLen(argv[i + 1], &len);
	if (rc == -2)
		reply_errorf(ctx, "ERR COST %.*s is too large: at most %llu",
			     (int)(len > QUOTE_MAX ? QUOTE_MAX : len), s,
			     (unsigned long long)SLUICE_UNITS_MAX);
	else
		reply_errorf(ctx,
			     "ERR COST \"%.*s\" is not a whole number >= 0",
			     (int)(len > QUOTE_MAX ? QUOTE_MAX : len), s);
	return -1;
}

/* Parses one capacity + rate pair; replies with the parser's message and
 * returns -1 on bad input. */
static int parse_limit(RedisModuleCtx *ctx, RedisModuleString *capacity,
		       RedisModuleString *rate, sluice_limit_t *limit)
{
	const char *c = arg_cstr(capacity), *r = arg_cstr(rate);
	char err[256];

	if (!c || !r) {
		RedisModule_ReplyWithError(
			ctx,
			"ERR capacity and rate must not contain NUL bytes");
		return -1;
	}
	if (sluice_limit_parse(limit, c, r, err, sizeof(err)) != 0) {
		reply_errorf(ctx, "ERR %s", err);
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- state */

/* A stored state: a decimal int64, as written by SET of a number. */
static int parse_state(const char *s, size_t len, sluice_state_t *out)
{
	size_t i = 0;
	int neg = 0;
	uint64_t v = 0;

	if (len > 0 && s[0] == '-') {
		neg = 1;
		i = 1;
	}
	if (i == len || len - i > 19)
		return -1;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (v > (uint64_t)INT64_MAX)
		return -1;
	*out = neg ? -(sluice_state_t)v : (sluice_state_t)v;
	return 0;
}

/* Reads the state of key (0, "full", when there is none).  Replies with the
 * error and returns -1 when the key holds something else. */
static int read_state(RedisModuleCtx *ctx, RedisModuleString *key,
		      sluice_state_t *state)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, key, REDISMODULE_READ);
	int type = RedisModule_KeyType(k);
	RedisModuleCallReply *r;
	const char *s;
	size_t len, klen;
	int rc = 0;

	/* The usual case for a limiter: the bucket is full, so there is no
	 * key (an expired one is deleted by the lookup) and nothing to GET. */
	RedisModule_CloseKey(k);
	if (type == REDISMODULE_KEYTYPE_EMPTY) {
		*state = 0;
		return 0;
	}
	if (type != REDISMODULE_KEYTYPE_STRING) {
		RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
		return -1;
	}
	/* GET, not the key API: reading an int-encoded string through
	 * RedisModule_StringDMA() would convert the stored value to a raw
	 * string (more memory) even when nothing is written. */
	r = RedisModule_Call(ctx, "GET", "s", key);
	if (!r) {
		RedisModule_ReplyWithError(ctx, "ERR sluice: GET failed");
		return -1;
	}
	switch (RedisModule_CallReplyType(r)) {
	case REDISMODULE_REPLY_NULL:
		*state = 0;
		break;
	case REDISMODULE_REPLY_STRING:
		s = RedisModule_CallReplyStringPtr(r, &len);
		if (parse_state(s, len, state) == 0)
			break;
		s = RedisModule_StringPtrLen(key, &klen);
		reply_errorf(ctx,
			     "ERR key \"%.*s\" does not hold a sluice state "
			     "(a decimal integer)",
			     (int)(klen > QUOTE_MAX ? QUOTE_MAX : klen), s);
		rc = -1;
		break;
	default:
		/* WRONGTYPE: a list, hash, ... under this name. */
		RedisModule_ReplyWithCallReply(ctx, r);
		rc = -1;
		break;
	}
	RedisModule_FreeCallReply(r);
	return rc;
}

/* Stores a state until its bucket is full again; "!" replicates the SET
 * (with an absolute expiry, so replicas and the AOF need no clock). */
static int write_state(RedisModuleCtx *ctx, RedisModuleString *key,
		       sluice_state_t state)
{
	int64_t exp_us = sluice_state_expiry_us(state);
	long long exp_ms = (long long)sluice_div_ceil((uint64_t)exp_us, 1000);
	RedisModuleCallReply *r = RedisModule_Call(
		ctx, "SET", "!slcl", key, (long long)state, "PXAT", exp_ms);
	int rc = 0;

	if (!r) {
		RedisModule_ReplyWithError(ctx, "ERR sluice: SET failed");
		return -1;
	}
	if (RedisModule_CallReplyType(r) == REDISMODULE_REPLY_ERROR) {
		RedisModule_ReplyWithCallReply(ctx, r);
		rc = -1;
	}
	RedisModule_FreeCallReply(r);
	return rc;
}

/* ------------------------------------------------------------- decision */

static long long us_to_ms_ceil(uint64_t us)
{
	return (long long)sluice_div_ceil(us, 1000);
}

/*
 * Charges `cost` to keys[i] under limits[i], all-or-nothing, and replies.
 * `which` adds the index of the most restrictive limit to the reply.
 */
static int take(RedisModuleCtx *ctx, RedisModuleString **keys,
		const sluice_limit_t *limits, size_t n, uint64_t cost,
		int which)
{
	sluice_state_t states[MAX_KEYS], next[MAX_KEYS];
	sluice_decision_t d[MAX_KEYS], summary;
	size_t i;
	int allowed;

	for (i = 0; i < n; i++)
		if (read_state(ctx, keys[i], &states[i]) != 0)
			return REDISMODULE_OK;
	allowed = sluice_eval_all(limits, states, n, sluice_rm_now_us(), cost,
				  next, d, &summary);
	if (allowed)
		for (i = 0; i < n; i++)
			if (next[i] != states[i] &&
			    write_state(ctx, keys[i], next[i]) != 0)
				return REDISMODULE_OK;

	RedisModule_ReplyWithArray(ctx, which ? 6 : 5);
	RedisModule_ReplyWithLongLong(ctx, summary.allowed);
	RedisModule_ReplyWithLongLong(ctx, (long long)summary.limit);
	RedisModule_ReplyWithLongLong(ctx, (long long)summary.remaining);
	RedisModule_ReplyWithLongLong(
		ctx,
		summary.never ? -1 : us_to_ms_ceil(summary.retry_after_us));
	RedisModule_ReplyWithLongLong(ctx,
				      us_to_ms_ceil(summary.reset_after_us));
	if (which)
		RedisModule_ReplyWithLongLong(ctx, (long long)summary.which);
	return REDISMODULE_OK;
}

/* ------------------------------------------------------------- commands */

int sluice_rm_take(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	sluice_limit_t limit;
	uint64_t cost = 1;

	if (argc != 4 && argc != 6)
		return RedisModule_ReplyWithError(
			ctx, "ERR wrong number of arguments for 'sluice.take' "
			     "command: expected " TAKE_USAGE);
	if (parse_limit(ctx, argv[2], argv[3], &limit) != 0)
		return REDISMODULE_OK;
	if (argc == 6 && parse_cost(ctx, argv, 4, &cost) != 0)
		return REDISMODULE_OK;
	return take(ctx, &argv[1], &limit, 1, cost, 0);
}

/* numkeys, or -1 when argv[1] is not a count 1 .. MAX_KEYS. */
static int multi_numkeys(RedisModuleString **argv, int argc)
{
	uint64_t n;

	if (argc < 2 || parse_count(argv[1], MAX_KEYS, &n) != 0 || n == 0)
		return -1;
	return (int)n;
}

static int same_string(RedisModuleString *a, RedisModuleString *b)
{
	size_t la, lb;
	const char *sa = RedisModule_StringPtrLen(a, &la);
	const char *sb = RedisModule_StringPtrLen(b, &lb);

	return la == lb && memcmp(sa, sb, la) == 0;
}

int sluice_rm_takemulti(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	sluice_limit_t limits[MAX_KEYS];
	uint64_t cost = 1;
	int n = multi_numkeys(argv, argc), i, j, rest;

	if (RedisModule_IsKeysPositionRequest(ctx)) {
		/* Cluster routing asks where the keys are: argv[2 .. 2+n). */
		for (i = 0; i < n && 2 + i < argc; i++)
			RedisModule_KeyAtPos(ctx, 2 + i);
		return REDISMODULE_OK;
	}
	if (argc < 2)
		return RedisModule_ReplyWithError(
			ctx,
			"ERR wrong number of arguments for "
			"'sluice.takemulti' command: expected " MULTI_USAGE);
	if (n < 0)
		return reply_errorf(ctx,
				    "ERR numkeys must be a whole number from 1 "
				    "to %d: expected " MULTI_USAGE,
				    MAX_KEYS);
	/* After numkeys: n keys, n capacity/rate pairs, maybe COST n. */
	rest = argc - 2;
	if (rest != 3 * n && rest != 3 * n + 2)
		return reply_errorf(
			ctx,
			"ERR numkeys is %d, so expected %d keys, %d "
			"capacity rate pairs and optionally COST n "
			"(%d or %d arguments after numkeys), got %d",
			n, n, n, 3 * n, 3 * n + 2, rest);
	for (i = 0; i < n; i++)
		for (j = 0; j < i; j++)
			if (same_string(argv[2 + i], argv[2 + j]))
				return reply_errorf(
					ctx,
					"ERR key %d is the same as key %d: "
					"each "
					"key holds one bucket, give it once",
					i + 1, j + 1);
	for (i = 0; i < n; i++)
		if (parse_limit(ctx, argv[2 + n + 2 * i], argv[3 + n + 2 * i],
				&limits[i]) != 0)
			return REDISMODULE_OK;
	if (rest == 3 * n + 2 && parse_cost(ctx, argv, 2 + 3 * n, &cost) != 0)
		return REDISMODULE_OK;
	return take(ctx, &argv[2], limits, (size_t)n, cost, 1);
}
