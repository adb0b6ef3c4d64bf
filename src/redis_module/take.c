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
 * through the key API, read, written and given its expiry there (see
 * "the server's string objects" below for how the value is kept
 * int-encoded like any SET of a number), and the write is replicated as
 * its effect, `SET key state PXAT ms` (several keys: inside MULTI/EXEC;
 * the batches below: one script running those SETs, see "replication"),
 * never as the clock-dependent command itself.  A rejected request or a
 * peek writes nothing.
 *
 *   SLUICE.TAKEMANY key capacity rate cost [key capacity rate cost ...]
 *   SLUICE.TAKEEACH capacity rate cost key [key ...]
 *
 * make independent decisions, one key and one limit each, in one call
 * (see sluice_rm_takemany() and sluice_rm_takeeach()).
 */
#include "redis_module/module.h"

#include <assert.h>
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

/* ------------------------------------------- the server's string objects */

/*
 * How the module stores a state (see module.c for the choice at load time
 * and docs/REDIS.md for the figures):
 *
 *   SLUICE_RM_STORE_INT     the low-level key API, and the value is an
 *                           int-encoded string object, as SET stores a
 *                           decimal integer (16 bytes, the integer in the
 *                           pointer).  The module API has no call that
 *                           makes one (RedisModule_CreateString* make raw
 *                           or embstr strings, RedisModule_StringSet stores
 *                           the object as given, RedisModule_StringDMA
 *                           turns an int-encoded value into a raw string
 *                           even for reading), so the module reads and
 *                           builds that object itself, after checking at
 *                           load time that the server lays its objects out
 *                           as Redis 7.0 - 8.0 do (sluice_rm_probe_objects()),
 *                           and for every key that the open key handle is
 *                           the one it expects.
 *   SLUICE_RM_STORE_STRING  the low-level key API with public calls only:
 *                           the value is an embstr string (about 24 bytes
 *                           more per key).
 *   SLUICE_RM_STORE_CALL    GET and SET through RedisModule_Call (the
 *                           slowest; what every server runs).
 *
 * Every mode stores the same bytes with the same expiry and replicates the
 * same effect, SET key state PXAT ms (STORE call: each SET as it runs; the
 * others gather a batch's SETs into one script, see "replication").
 */
int sluice_rm_store = SLUICE_RM_STORE_CALL;

/* The head of the server's object (robj) and of its open-key handle, as
 * Redis 7.0 - 8.0 declare them (server.h, module.c). */
struct server_obj {
	unsigned type : 4;
	unsigned encoding : 4;
	unsigned lru : 24;
	int refcount;
	void *ptr;
};

struct server_key {
	void *ctx;
	void *db;
	struct server_obj *key;
	struct server_obj *value;
};

#define OBJ_STRING	    0
#define OBJ_ENCODING_RAW    0
#define OBJ_ENCODING_INT    1
#define OBJ_ENCODING_EMBSTR 8

int sluice_rm_probe_objects(void)
{
	static const char digits[] = "1234567890123456789";
	RedisModuleString *s = RedisModule_CreateStringFromLongLong(
		NULL, 1234567890123456789LL);
	const struct server_obj *o = (const struct server_obj *)s;
	size_t len;
	const char *p = RedisModule_StringPtrLen(s, &len);
	/* An embstr: the object, a 3-byte sds header, the bytes. */
	int ok = o->type == OBJ_STRING && o->encoding == OBJ_ENCODING_EMBSTR &&
		 o->refcount == 1 && o->ptr == (const void *)p &&
		 p == (const char *)(o + 1) + 3 && len == sizeof(digits) - 1 &&
		 memcmp(p, digits, len) == 0;

	RedisModule_FreeString(NULL, s);
	return ok;
}

/* The value object of an open key, when the handle is laid out as
 * expected (its context and key name are the ones it was opened with);
 * NULL otherwise or when the key is empty. */
static struct server_obj *key_value(RedisModuleCtx *ctx, RedisModuleKey *k,
				    RedisModuleString *keyname, int *known)
{
	const struct server_key *h = (const struct server_key *)k;

	*known = h->ctx == (void *)ctx && h->key == (void *)keyname;
	return *known ? h->value : NULL;
}

/* A new int-encoded string object holding v, as SET of a decimal number
 * stores it.  Its LRU/LFU field is the key name's, an object the server
 * made for this command under the current maxmemory-policy. */
static RedisModuleString *int_object(RedisModuleString *keyname, int64_t v)
{
	const struct server_obj *name = (const struct server_obj *)keyname;
	struct server_obj *o = RedisModule_Alloc(sizeof(*o));

	o->type = OBJ_STRING;
	o->encoding = OBJ_ENCODING_INT;
	o->lru = name->lru;
	o->refcount = 1;
	o->ptr = (void *)(intptr_t)v;
	return (RedisModuleString *)o;
}

/* ---------------------------------------------------------------- state */

static int reply_not_state(RedisModuleCtx *ctx, RedisModuleString *key)
{
	size_t klen;
	const char *s = RedisModule_StringPtrLen(key, &klen);

	return reply_errorf(ctx,
			    "ERR key \"%.*s\" does not hold a sluice state "
			    "(a decimal integer)",
			    (int)(klen > QUOTE_MAX ? QUOTE_MAX : klen), s);
}

/* SLUICE_RM_STORE_CALL: reads the state of key with GET (0, "full", when
 * there is none).  Replies with the error and returns -1 when the key holds
 * something else. */
static int call_read_state(RedisModuleCtx *ctx, RedisModuleString *key,
			   sluice_state_t *state)
{
	RedisModuleKey *k = RedisModule_OpenKey(ctx, key, REDISMODULE_READ);
	int type = RedisModule_KeyType(k);
	RedisModuleCallReply *r;
	const char *s;
	size_t len;
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
		reply_not_state(ctx, key);
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

/* SLUICE_RM_STORE_CALL: stores a state until its bucket is full again; "!"
 * replicates the SET (with an absolute expiry, so replicas and the AOF need
 * no clock). */
static int call_write_state(RedisModuleCtx *ctx, RedisModuleString *key,
			    sluice_state_t state, long long exp_ms)
{
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

/*
 * Opens key for reading and writing and reads its state (0 when there is
 * no key).  *kp is the open key, to be closed by the caller, or NULL in
 * SLUICE_RM_STORE_CALL mode.  Replies with the error and returns -1 when
 * the key holds something else (*kp is then closed and NULL).
 */
static int open_state(RedisModuleCtx *ctx, RedisModuleString *key,
		      RedisModuleKey **kp, sluice_state_t *state)
{
	RedisModuleKey *k;
	struct server_obj *v;
	const char *s;
	size_t len;
	int type, known;

	*kp = NULL;
	if (sluice_rm_store == SLUICE_RM_STORE_CALL)
		return call_read_state(ctx, key, state);
	k = RedisModule_OpenKey(ctx, key, REDISMODULE_READ | REDISMODULE_WRITE);
	type = RedisModule_KeyType(k);
	*state = 0;
	if (type == REDISMODULE_KEYTYPE_EMPTY) {
		*kp = k;
		return 0;
	}
	if (type != REDISMODULE_KEYTYPE_STRING) {
		RedisModule_CloseKey(k);
		RedisModule_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
		return -1;
	}
	s = NULL;
	len = 0;
	if (sluice_rm_store == SLUICE_RM_STORE_INT &&
	    (v = key_value(ctx, k, key, &known)) != NULL &&
	    v->type == OBJ_STRING) {
		if (v->encoding == OBJ_ENCODING_INT) {
			*state = (sluice_state_t)(intptr_t)v->ptr;
			*kp = k;
			return 0;
		}
		/* raw or embstr: the object is a module string */
		s = RedisModule_StringPtrLen((RedisModuleString *)v, &len);
	} else {
		s = RedisModule_StringDMA(k, &len, REDISMODULE_READ);
	}
	if (!s || parse_state(s, len, state) != 0) {
		RedisModule_CloseKey(k);
		reply_not_state(ctx, key);
		return -1;
	}
	*kp = k;
	return 0;
}

/* ---------------------------------------------------------- replication */

/*
 * What a write replicates.  SLUICE.TAKE and TAKEMULTI replicate each write
 * as it happens: `SET key state PXAT ms` (several in one command: inside
 * MULTI/EXEC, as the server wraps them).  The batches of independent
 * decisions, TAKEMANY and TAKEEACH, gather their writes and replicate them
 * once, when the command ends: one write as that same SET, two or more as
 * one EVAL of REPL_SCRIPT, which runs those SETs, in order, with those
 * arguments (KEYS the keys, ARGV a state and its PXAT per key).  Replicas
 * and the AOF end with the same bytes and expiries either way (the script
 * reads no clock: deterministic), and need no module.
 *
 * Why: RedisModule_Replicate() costs the same whether anyone listens or
 * not (it looks the command up by name and builds an argument vector:
 * about 12% of a 16-key TAKEEACH's Redis CPU went there, with no replica
 * and no AOF), so a batch that called it per key paid it per key.
 */
#define REPL_SCRIPT                                                            \
	"for i=1,#KEYS do redis.call('SET',KEYS[i],ARGV[2*i-1],'PXAT',"        \
	"ARGV[2*i]) end"

/* "PXAT" and REPL_SCRIPT, made once (sluice_rm_take_init()) and handed to
 * every replicated command by reference. */
static RedisModuleString *pxat_word, *repl_script;

int sluice_rm_take_init(void)
{
	pxat_word = RedisModule_CreateString(NULL, "PXAT", 4);
	repl_script = RedisModule_CreateString(NULL, REPL_SCRIPT,
					       sizeof(REPL_SCRIPT) - 1);
	return pxat_word && repl_script ? 0 : -1;
}

/*
 * The writes of one batch command, replicated when it ends (repl_flush()).
 * v holds the keys at [0, cap) and a (state, expiry) pair per key from
 * cap on: the EVAL's KEYS and ARGV once the pairs are moved next to the
 * n keys.  Keys are the command's arguments (alive until it returns);
 * states and expiries are references the batch holds.
 */
struct repl_batch {
	RedisModuleString **v;
	int cap, n;
	long long last_exp_ms; /* the expiry object of the last write */
};

/* A batch for at most cap writes; v (3 * cap pointers) is the caller's. */
static void repl_init(struct repl_batch *rb, RedisModuleString **v, int cap)
{
	rb->v = v;
	rb->cap = cap;
	rb->n = 0;
	rb->last_exp_ms = -1;
}

/* Replicates and releases what the batch gathered. */
static void repl_flush(RedisModuleCtx *ctx, struct repl_batch *rb)
{
	RedisModuleString **pairs = rb->v + rb->cap;
	int i, n = rb->n;

	if (n == 1)
		RedisModule_Replicate(ctx, "SET", "ssss", rb->v[0], pairs[0],
				      pxat_word, pairs[1]);
	else if (n > 1) {
		memmove(rb->v + n, pairs, sizeof(*pairs) * 2 * (size_t)n);
		pairs = rb->v + n;
		RedisModule_Replicate(ctx, "EVAL", "slv", repl_script,
				      (long long)n, rb->v, (size_t)(3 * n));
	}
	for (i = 0; i < 2 * n; i++)
		RedisModule_FreeString(NULL, pairs[i]);
	rb->n = 0;
}

/* A string object holding v, for a replicated argument: int-encoded (one
 * allocation) where the layout is known, else the public call. */
static RedisModuleString *number_object(RedisModuleString *keyname, int64_t v)
{
	if (sluice_rm_store == SLUICE_RM_STORE_INT)
		return int_object(keyname, v);
	return RedisModule_CreateStringFromLongLong(NULL, v);
}

/*
 * Stores a state in the open key k (or with SET when k is NULL) until its
 * bucket is full again, with the effects of SET key state PXAT ms:
 * WATCH and client tracking see the key modified, keyspace events "set"
 * and "expire", and that SET replicated (absolute expiry: replicas and the
 * AOF need no clock).
 *
 * The replicated SET (or, in a batch, rb's share of the script's
 * arguments) costs what a batch pays per key, so it is built from
 * objects that exist already, passed by reference ("s"): the key name, the
 * value object just stored and the "PXAT" word; only the expiry is a new
 * object.  Replicas and the AOF receive the same bytes as from formatted
 * numbers (the server writes an int-encoded argument as its decimal
 * digits).  A value object shared with the pending replication this way
 * is never overwritten in place (its reference count is above 1 then): a
 * second write of the key in the same command stores a new object.
 */
static int write_state(RedisModuleCtx *ctx, RedisModuleKey *k,
		       RedisModuleString *key, sluice_state_t state,
		       struct repl_batch *rb)
{
	int64_t exp_us = sluice_state_expiry_us(state);
	long long exp_ms = (long long)sluice_div_ceil((uint64_t)exp_us, 1000);
	struct server_obj *v;
	RedisModuleString *o, *exp;
	int known;

	if (!k)
		return call_write_state(ctx, key, state, exp_ms);
	if (sluice_rm_store == SLUICE_RM_STORE_INT &&
	    ((v = key_value(ctx, k, key, &known)) != NULL || known)) {
		if (v && v->type == OBJ_STRING &&
		    v->encoding == OBJ_ENCODING_INT && v->refcount == 1) {
			/* Our own int object: overwrite the integer. */
			v->ptr = (void *)(intptr_t)state;
			o = (RedisModuleString *)v;
		} else {
			o = int_object(key, state);
			RedisModule_StringSet(k, o);
			RedisModule_FreeString(NULL, o);
		}
	} else {
		o = RedisModule_CreateStringFromLongLong(NULL, state);
		RedisModule_StringSet(k, o);
		RedisModule_FreeString(NULL, o);
	}
	/* o is the key's value now: the key holds a reference to it. */
	RedisModule_SignalModifiedKey(ctx, key);
	RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_STRING, "set",
					key);
	RedisModule_SetAbsExpire(k, exp_ms);
	RedisModule_NotifyKeyspaceEvent(ctx, REDISMODULE_NOTIFY_GENERIC,
					"expire", key);
	if (!rb) {
		exp = number_object(key, exp_ms);
		RedisModule_Replicate(ctx, "SET", "ssss", key, o, pxat_word,
				      exp);
		RedisModule_FreeString(NULL, exp);
		return 0;
	}
	/* A batch: keep o (a later write of the key in this command then
	 * stores a new object) and the expiry, shared with the previous
	 * write when equal (a batch under one limit often has them all
	 * equal), until repl_flush(). */
	assert(rb->n < rb->cap);
	if (rb->n > 0 && rb->last_exp_ms == exp_ms) {
		exp = rb->v[rb->cap + 2 * rb->n - 1];
		RedisModule_RetainString(NULL, exp);
	} else {
		exp = number_object(key, exp_ms);
	}
	RedisModule_RetainString(NULL, o);
	rb->v[rb->n] = key;
	rb->v[rb->cap + 2 * rb->n] = o;
	rb->v[rb->cap + 2 * rb->n + 1] = exp;
	rb->last_exp_ms = exp_ms;
	rb->n++;
	return 0;
}

static void close_keys(RedisModuleKey **k, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		RedisModule_CloseKey(k[i]);
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
 * Charges `cost` to keys[i] under limits[i], all-or-nothing, and replies
 * (`reply`: 0 replies only errors).  `which` adds the index of the most
 * restrictive limit to the reply.  The writes are replicated at once, or
 * gathered in rb when it is not NULL.  Returns 0, or -1 after replying
 * with an error.
 */
static int take(RedisModuleCtx *ctx, RedisModuleString **keys,
		const sluice_limit_t *limits, size_t n, uint64_t cost,
		int64_t now_us, int which, struct repl_batch *rb)
{
	sluice_state_t states[MAX_KEYS] = {0}, next[MAX_KEYS];
	sluice_decision_t d[MAX_KEYS], summary;
	RedisModuleKey *k[MAX_KEYS];
	size_t i;
	int allowed, rc = 0;

	for (i = 0; i < n; i++)
		if (open_state(ctx, keys[i], &k[i], &states[i]) != 0) {
			close_keys(k, i);
			return -1;
		}
	allowed = sluice_eval_all(limits, states, n, now_us, cost, next, d,
				  &summary);
	if (allowed)
		for (i = 0; i < n && rc == 0; i++)
			if (next[i] != states[i])
				rc = write_state(ctx, k[i], keys[i], next[i],
						 rb);
	close_keys(k, n);
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
	struct repl_batch rb;
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
	repl_init(&rb, v, n);
	RedisModule_ReplyWithArray(ctx, n);
	for (i = 0; i < n; i++)
		take(ctx, &argv[1 + 4 * i], &limits[i], 1, costs[i], now, 0,
		     &rb);
	repl_flush(ctx, &rb);
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
	struct repl_batch rb;
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
	repl_init(&rb, v, n);
	RedisModule_ReplyWithArray(ctx, n);
	for (i = 0; i < n; i++)
		take(ctx, &argv[4 + i], &limit, 1, cost, now, 0, &rb);
	repl_flush(ctx, &rb);
	if (v != stack_v)
		RedisModule_Free(v);
	return REDISMODULE_OK;
}
