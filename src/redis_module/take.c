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
 * module and the script can serve the same keys.  The key is opened once
 * through the key API, read, written and given its expiry there, and the
 * write is replicated as its effect, `SET key state PXAT ms` (several
 * keys: inside MULTI/EXEC; the batches below: one script running those
 * SETs), never as the clock-dependent command itself: state.c.  A
 * rejected request or a peek writes nothing.
 *
 *   SLUICE.TAKEMANY key capacity rate cost [key capacity rate cost ...]
 *   SLUICE.TAKEEACH capacity rate cost key [key ...]
 *
 * make independent decisions, one key and one limit each, in one call
 * (see sluice_rm_takemany() and sluice_rm_takeeach()).
 */
#include "redis_module/module.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sluice.h"
#include "util/num.h"

int sluice_rm_arg_is(RedisModuleString *arg, const char *word)
{
	size_t len;
	const char *s = RedisModule_StringPtrLen(arg, &len);

	return len == strlen(word) && strncasecmp(s, word, len) == 0;
}

/* The most keys one TAKEMULTI accepts: one per limit of a call. */
#define MAX_KEYS SLUICE_MAX_LIMITS

#define TAKE_USAGE "SLUICE.TAKE key capacity rate [COST n]"
#define MULTI_USAGE                                                            \
	"SLUICE.TAKEMULTI numkeys key [key ...] capacity rate "                \
	"[capacity rate ...] [COST n]"
#define MANY_USAGE                                                             \
	"SLUICE.TAKEMANY key capacity rate cost "                              \
	"[key capacity rate cost ...]"
#define EACH_USAGE "SLUICE.TAKEEACH capacity rate cost key [key ...]"

/* The most decisions one TAKEMANY accepts. */
#define MANY_MAX 4096

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
	if ((r[0] == '@' ? sluice_rm_quota_parse(c, r, limit, err, sizeof(err))
			 : sluice_limit_parse(limit, c, r, err, sizeof(err))) !=
	    0) {
		reply_errorf(ctx, "ERR %s", err);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------- decision */

static long long us_to_ms_ceil(uint64_t us)
{
	return (long long)sluice_div_ceil(us, 1000);
}

static void reply_decision(RedisModuleCtx *ctx, const sluice_decision_t *d,
			   int which)
{
	RedisModule_ReplyWithArray(ctx, which ? 6 : 5);
	RedisModule_ReplyWithLongLong(ctx, d->allowed);
	RedisModule_ReplyWithLongLong(ctx, (long long)d->limit);
	RedisModule_ReplyWithLongLong(ctx, (long long)d->remaining);
	RedisModule_ReplyWithLongLong(
		ctx, d->never ? -1 : us_to_ms_ceil(d->retry_after_us));
	RedisModule_ReplyWithLongLong(ctx, us_to_ms_ceil(d->reset_after_us));
	if (which)
		RedisModule_ReplyWithLongLong(ctx, (long long)d->which);
}

/*
 * Before key i of n (keys[i * stride]) is opened, in a batch or in one
 * TAKEMULTI: the first key tells the redisDb (sluice_rm_opened_db());
 * from the second on, each window of 16 keys is prefetched together
 * before its first is opened (prefetch.c; nothing when it is off).
 */
static void prefetch_ahead(RedisModuleString **keys, int stride, int i, int n)
{
	if (i > 0 && (i - 1) % 16 == 0 && sluice_rm_prefetch_on())
		sluice_rm_prefetch(sluice_rm_opened_db(), keys + i * stride,
				   stride, n - i);
}

/*
 * Charges `cost` to keys[i] under limits[i], all-or-nothing, and replies
 * (`reply`: 0 replies only errors).  `which` adds the index of the most
 * restrictive limit to the reply.  The writes are replicated at once, or
 * gathered in rb when it is not NULL.  Returns 0, or -1 after replying
 * with an error.
 */
static int take(RedisModuleCtx *ctx, RedisModuleString **keys,
		const sluice_limit_t *limits, size_t n, uint64_t cost,
		int64_t now_us, int which, struct sluice_rm_repl *rb)
{
	sluice_state_t states[MAX_KEYS] = {0}, next[MAX_KEYS];
	sluice_decision_t d[MAX_KEYS], summary;
	RedisModuleKey *k[MAX_KEYS];
	size_t i;
	int allowed, rc = 0;

	if (n > 1)
		sluice_rm_forget_db();
	for (i = 0; i < n; i++) {
		prefetch_ahead(keys, 1, i, (int)n);
		if (sluice_rm_open_state(ctx, keys[i], &k[i], &states[i]) !=
		    0) {
			sluice_rm_close_keys(k, i);
			return -1;
		}
	}
	allowed = sluice_eval_all(limits, states, n, now_us, cost, next, d,
				  &summary);
	if (allowed)
		for (i = 0; i < n && rc == 0; i++)
			if (next[i] != states[i])
				rc = sluice_rm_write_state(ctx, k[i], keys[i],
							   next[i], rb);
	sluice_rm_close_keys(k, n);
	if (rc == 0)
		reply_decision(ctx, &summary, which);
	return rc;
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
	take(ctx, &argv[1], &limit, 1, cost, sluice_rm_now_us(), 0, NULL);
	return REDISMODULE_OK;
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
	take(ctx, &argv[2], limits, (size_t)n, cost, sluice_rm_now_us(), 1,
	     NULL);
	return REDISMODULE_OK;
}

/* The cost argument of TAKEMANY (decision `index`, from 1) and TAKEEACH
 * (index 0): a whole number 0 .. SLUICE_UNITS_MAX. */
static int parse_many_cost(RedisModuleCtx *ctx, RedisModuleString *arg,
			   int index, uint64_t *cost)
{
	char where[32] = "";
	size_t len;
	const char *s;
	int rc = parse_count(arg, SLUICE_UNITS_MAX, cost);

	if (rc == 0)
		return 0;
	if (index > 0)
		snprintf(where, sizeof(where), "decision %d: ", index);
	s = RedisModule_StringPtrLen(arg, &len);
	if (rc == -2)
		reply_errorf(ctx, "ERR %scost %.*s is too large: at most %llu",
			     where, (int)(len > QUOTE_MAX ? QUOTE_MAX : len), s,
			     (unsigned long long)SLUICE_UNITS_MAX);
	else
		reply_errorf(
			ctx, "ERR %scost \"%.*s\" is not a whole number >= 0",
			where, (int)(len > QUOTE_MAX ? QUOTE_MAX : len), s);
	return -1;
}

/*
 * SLUICE.TAKEMANY key capacity rate cost [key capacity rate cost ...]
 *
 * Independent decisions, one key and one limit each, in one call: the
 * reply is an array with one element per decision, in order, each what
 * SLUICE.TAKE would have replied to `SLUICE.TAKE key capacity rate COST
 * cost` at that point (the array of five integers, or the error for a key
 * that holds something else).  The same key may come more than once: its
 * decisions follow each other.  Bad arguments fail the whole call before
 * anything is decided.  All decisions are made at one instant, the
 * command's time, as TAKEs one after the other at that instant.
 */
int sluice_rm_takemany(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	sluice_limit_t stack_limits[64], *limits = stack_limits;
	uint64_t stack_costs[64], *costs = stack_costs;
	RedisModuleString *stack_v[3 * 64], **v = stack_v;
	struct sluice_rm_repl rb;
	int64_t now;
	int n, i;

	if (argc < 5 || (argc - 1) % 4 != 0)
		return RedisModule_ReplyWithError(
			ctx, "ERR wrong number of arguments for "
			     "'sluice.takemany' command: expected " MANY_USAGE);
	n = (argc - 1) / 4;
	if (n > MANY_MAX)
		return reply_errorf(ctx,
				    "ERR SLUICE.TAKEMANY takes at most %d "
				    "decisions, got %d",
				    MANY_MAX, n);
	if (n > 64) {
		limits = RedisModule_Alloc(sizeof(*limits) * (size_t)n);
		costs = RedisModule_Alloc(sizeof(*costs) * (size_t)n);
		v = RedisModule_Alloc(sizeof(*v) * 3 * (size_t)n);
	}
	for (i = 0; i < n; i++) {
		RedisModuleString **a = &argv[1 + 4 * i], **prev = a - 4;

		/* Runs of one limit are common: parse it once. */
		if (i > 0 && same_string(a[1], prev[1]) &&
		    same_string(a[2], prev[2]))
			limits[i] = limits[i - 1];
		else if (parse_limit(ctx, a[1], a[2], &limits[i]) != 0)
			goto out;
		if (parse_many_cost(ctx, a[3], i + 1, &costs[i]) != 0)
			goto out;
	}
	now = sluice_rm_now_us();
	sluice_rm_repl_init(&rb, v, n);
	RedisModule_ReplyWithArray(ctx, n);
	sluice_rm_forget_db();
	for (i = 0; i < n; i++) {
		prefetch_ahead(&argv[1], 4, i, n);
		take(ctx, &argv[1 + 4 * i], &limits[i], 1, costs[i], now, 0,
		     &rb);
	}
	sluice_rm_repl_flush(ctx, &rb);
out:
	if (limits != stack_limits) {
		RedisModule_Free(limits);
		RedisModule_Free(costs);
		RedisModule_Free(v);
	}
	return REDISMODULE_OK;
}

/*
 * SLUICE.TAKEEACH capacity rate cost key [key ...]
 *
 * The batch of many decisions under one limit (a rule's keys gathered
 * from one event loop turn): each key is decided on its own, as by
 * `SLUICE.TAKE key capacity rate COST cost`, in order, at one instant.
 * The reply is TAKEMANY's: one element per key, the array of five
 * integers or the error for a key that holds something else.  Stated
 * once, the limit and the cost are parsed once, and the server reads one
 * argument per decision instead of four: what makes a batch cheaper per
 * decision than single TAKEs.  Bad arguments fail the whole call before
 * anything is decided.
 */
int sluice_rm_takeeach(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	sluice_limit_t limit;
	uint64_t cost;
	RedisModuleString *stack_v[3 * 64], **v = stack_v;
	struct sluice_rm_repl rb;
	int64_t now;
	int n, i;

	if (argc < 5)
		return RedisModule_ReplyWithError(
			ctx, "ERR wrong number of arguments for "
			     "'sluice.takeeach' command: expected " EACH_USAGE);
	n = argc - 4;
	if (n > MANY_MAX)
		return reply_errorf(ctx,
				    "ERR SLUICE.TAKEEACH takes at most %d "
				    "keys, got %d",
				    MANY_MAX, n);
	if (parse_limit(ctx, argv[1], argv[2], &limit) != 0 ||
	    parse_many_cost(ctx, argv[3], 0, &cost) != 0)
		return REDISMODULE_OK;
	now = sluice_rm_now_us();
	if (n > 64)
		v = RedisModule_Alloc(sizeof(*v) * 3 * (size_t)n);
	sluice_rm_repl_init(&rb, v, n);
	RedisModule_ReplyWithArray(ctx, n);
	sluice_rm_forget_db();
	for (i = 0; i < n; i++) {
		prefetch_ahead(&argv[4], 1, i, n);
		take(ctx, &argv[4 + i], &limit, 1, cost, now, 0, &rb);
	}
	sluice_rm_repl_flush(ctx, &rb);
	if (v != stack_v)
		RedisModule_Free(v);
	return REDISMODULE_OK;
}

int sluice_rm_parse_limit(RedisModuleCtx *ctx, RedisModuleString *capacity,
			  RedisModuleString *rate, sluice_limit_t *limit)
{
	return parse_limit(ctx, capacity, rate, limit);
}

/* ---------------------------------------------------------- reservations */

#define RESERVE_USAGE "SLUICE.RESERVE key capacity rate max_wait_us [COST n]"

/*
 * SLUICE.RESERVE key capacity rate max_wait_us [COST n]
 *
 * A reservation (sluice_reserve_all()): charges now, into debt if need
 * be, and answers the wait until this request's turn; refused, writing
 * nothing, when that turn is more than max_wait_us microseconds away
 * (at most 2^40; more is that).  Reply:
 *
 *   [reserved, limit, remaining, retry_after_ms, reset_ms, wait_us, now_us,
 *    state]
 *
 * reserved is 1 or 0; limit, remaining and reset_ms as SLUICE.TAKE's
 * (after the charge); retry_after_ms 0 when reserved, else the time until
 * a reservation with the same max_wait would pass (-1: never); wait_us
 * the time from now_us to the turn (refused: the turn it would have had,
 * -1 never); now_us the command's time, so now_us + wait_us is the turn
 * on the server's one clock whoever asked; state the state written (0
 * when nothing was: refused, or a cost of 0), what SLUICE.REFUNDIF
 * expects.  The state written is the one the script path (reserve.lua)
 * writes, so either serves the same keys.
 */
int sluice_rm_reserve(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	sluice_limit_t limit;
	sluice_state_t state = 0, next;
	sluice_decision_t d;
	RedisModuleKey *k;
	uint64_t cost = 1, max_wait, wait;
	int64_t now;
	size_t len;
	const char *s;
	int ok, rc = 0;

	if (argc != 5 && argc != 7)
		return RedisModule_ReplyWithError(
			ctx,
			"ERR wrong number of arguments for "
			"'sluice.reserve' command: expected " RESERVE_USAGE);
	if (parse_limit(ctx, argv[2], argv[3], &limit) != 0)
		return REDISMODULE_OK;
	rc = parse_count(argv[4], UINT64_MAX, &max_wait);
	if (rc == -1) {
		s = RedisModule_StringPtrLen(argv[4], &len);
		return reply_errorf(
			ctx,
			"ERR max_wait_us \"%.*s\" is not a whole number >= 0",
			(int)(len > QUOTE_MAX ? QUOTE_MAX : len), s);
	}
	if (rc == -2)
		max_wait = UINT64_MAX; /* beyond the cap all the same */
	if (argc == 7 && parse_cost(ctx, argv, 5, &cost) != 0)
		return REDISMODULE_OK;
	now = sluice_rm_now_us();
	if (sluice_rm_open_state(ctx, argv[1], &k, &state) != 0)
		return REDISMODULE_OK;
	ok = sluice_reserve_all(&limit, &state, 1, now, cost, max_wait, &next,
				&d, &wait);
	rc = 0;
	if (ok && next != state)
		rc = sluice_rm_write_state(ctx, k, argv[1], next, NULL);
	sluice_rm_close_keys(&k, 1);
	if (rc != 0)
		return REDISMODULE_OK;
	RedisModule_ReplyWithArray(ctx, 8);
	RedisModule_ReplyWithLongLong(ctx, ok);
	RedisModule_ReplyWithLongLong(ctx, (long long)d.limit);
	RedisModule_ReplyWithLongLong(ctx, (long long)d.remaining);
	RedisModule_ReplyWithLongLong(
		ctx, ok ? 0
		     : d.retry_after_us == UINT64_MAX
			     ? -1
			     : us_to_ms_ceil(d.retry_after_us));
	RedisModule_ReplyWithLongLong(ctx, us_to_ms_ceil(d.reset_after_us));
	RedisModule_ReplyWithLongLong(
		ctx, wait == UINT64_MAX ? -1 : (long long)wait);
	RedisModule_ReplyWithLongLong(ctx, (long long)now);
	RedisModule_ReplyWithLongLong(ctx,
				      ok && cost > 0 ? (long long)next : 0);
	return REDISMODULE_OK;
}

#define REFUNDIF_USAGE "SLUICE.REFUNDIF key capacity rate state [COST n]"

/*
 * SLUICE.REFUNDIF key capacity rate state [COST n]
 *
 * A conditional refund (sluice_refund_if()): gives the cost back only
 * when the key still holds `state`, the one a SLUICE.RESERVE answered
 * (nothing charged after that reservation); else writes nothing.
 * Replies 1 when refunded, 0 when not.  refund_if.lua does the same on
 * the script path.
 */
int sluice_rm_refund_if(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
	sluice_limit_t limit;
	sluice_state_t state = 0, want, next;
	RedisModuleKey *k;
	uint64_t cost = 1, v;
	int ok, rc = 0;

	if (argc != 5 && argc != 7)
		return RedisModule_ReplyWithError(
			ctx,
			"ERR wrong number of arguments for "
			"'sluice.refundif' command: expected " REFUNDIF_USAGE);
	if (parse_limit(ctx, argv[2], argv[3], &limit) != 0)
		return REDISMODULE_OK;
	if (parse_count(argv[4], INT64_MAX, &v) != 0)
		return RedisModule_ReplyWithError(
			ctx, "ERR state is not a whole number >= 0 (the state "
			     "SLUICE.RESERVE answered)");
	want = (sluice_state_t)v;
	if (argc == 7 && parse_cost(ctx, argv, 5, &cost) != 0)
		return REDISMODULE_OK;
	if (sluice_rm_open_state(ctx, argv[1], &k, &state) != 0)
		return REDISMODULE_OK;
	ok = sluice_refund_if(&limit, &state, &want, 1, sluice_rm_now_us(),
			      cost, &next);
	if (ok && next != state && next > 0)
		rc = sluice_rm_write_state(ctx, k, argv[1], next, NULL);
	sluice_rm_close_keys(&k, 1);
	if (ok && next == 0) {
		/* Full again: the key goes, as refund.lua deletes it. */
		RedisModuleCallReply *r =
			RedisModule_Call(ctx, "DEL", "!s", argv[1]);

		if (r)
			RedisModule_FreeCallReply(r);
	}
	if (rc != 0)
		return REDISMODULE_OK;
	return RedisModule_ReplyWithLongLong(ctx, ok);
}
