/*
 * state.c -- how sluice-redis.so reads, writes and replicates the state of
 * a key (the commands are in take.c).
 *
 * The state of a key is the bucket's sluice_state_t stored as a plain
 * string holding the decimal integer, with an expiry at the instant the
 * bucket is full again (sluice_state_expiry_us(), rounded up to a whole
 * millisecond): the value the Redis script path writes, so the module and
 * the script can serve the same keys.  The key is opened once through the
 * key API, read, written and given its expiry there (see "the server's
 * string objects" for how the value is kept int-encoded like any SET of a
 * number), and the write is replicated as its effect (see "replication").
 */
#include "redis_module/module.h"
#include "util/invariant.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "util/num.h"

/* Longest piece of user input quoted back in an error message. */
#define QUOTE_MAX 64

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

static void *batch_db; /* sluice_rm_opened_db() */

void *sluice_rm_opened_db(void)
{
	return batch_db;
}

void sluice_rm_forget_db(void)
{
	batch_db = NULL;
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

	char msg[160];

	snprintf(msg, sizeof(msg),
		 "ERR key \"%.*s\" does not hold a sluice state (a decimal "
		 "integer)",
		 (int)(klen > QUOTE_MAX ? QUOTE_MAX : klen), s);
	return RedisModule_ReplyWithError(ctx, msg);
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
int sluice_rm_open_state(RedisModuleCtx *ctx, RedisModuleString *key,
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
	if (sluice_rm_store == SLUICE_RM_STORE_INT) {
		key_value(ctx, k, key, &known);
		if (known)
			batch_db = ((const struct server_key *)k)->db;
	}
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
 * once, when the command ends: one write as that same SET, two or more,
 * while no replica is connected, as one EVAL of REPL_SCRIPT, which runs
 * those SETs, in order, with those arguments (KEYS the keys, ARGV a state
 * and its PXAT per key); with a replica connected, as those SETs (inside
 * MULTI/EXEC).  Replicas and the AOF end with the same bytes and expiries
 * either way (the script reads no clock: deterministic), and need no
 * module.
 *
 * Why: RedisModule_Replicate() costs the same whether anyone listens or
 * not (it looks the command up by name and builds an argument vector:
 * about 12% of a 16-key TAKEEACH's Redis CPU went there, with no replica
 * and no AOF), so a batch that called it per key paid it per key.  But a
 * replica runs the script slower than the plain SETs (Lua calls SET for
 * each key: a 16-key TAKEEACH cost its replica 5.2 us per key against 3.8
 * for the SETs, more than its master's 2.8), and a replica slower than its
 * master falls behind at full load; so with a replica connected the SETs
 * go as before.  Whether one is connected is read from INFO at most every
 * REPLICAS_CHECK_MS: a batch in between may use either form, both right.
 */
#define REPL_SCRIPT                                                            \
	"for i=1,#KEYS do redis.call('SET',KEYS[i],ARGV[2*i-1],'PXAT',"        \
	"ARGV[2*i]) end"

/* "PXAT" and REPL_SCRIPT, made once (sluice_rm_state_init()) and handed to
 * every replicated command by reference. */
static RedisModuleString *pxat_word, *repl_script;

int sluice_rm_state_init(void)
{
	pxat_word = RedisModule_CreateString(NULL, "PXAT", 4);
	repl_script = RedisModule_CreateString(NULL, REPL_SCRIPT,
					       sizeof(REPL_SCRIPT) - 1);
	return pxat_word && repl_script ? 0 : -1;
}

#define REPLICAS_CHECK_MS 100

/* 1 when no replica was connected at the last look (INFO replication
 * connected_slaves), taken at most every REPLICAS_CHECK_MS. */
static int no_replica(RedisModuleCtx *ctx)
{
	static int none = 1;
	static int64_t checked_ms = -REPLICAS_CHECK_MS; /* never */
	RedisModuleServerInfoData *info;
	struct timespec ts;
	int64_t now_ms;
	int err = 0;
	long long n;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	if (now_ms - checked_ms < REPLICAS_CHECK_MS)
		return none;
	checked_ms = now_ms;
	info = RedisModule_GetServerInfo(ctx, "replication");
	if (!info)
		return none = 0;
	n = RedisModule_ServerInfoGetFieldSigned(info, "connected_slaves",
						 &err);
	RedisModule_FreeServerInfo(ctx, info);
	none = !err && n == 0;
	return none;
}

/* A batch for at most cap writes; v (3 * cap pointers) is the caller's. */
void sluice_rm_repl_init(struct sluice_rm_repl *rb, RedisModuleString **v,
			 int cap)
{
	rb->v = v;
	rb->cap = cap;
	rb->n = 0;
	rb->last_exp_ms = -1;
}

/* Replicates and releases what the batch gathered. */
void sluice_rm_repl_flush(RedisModuleCtx *ctx, struct sluice_rm_repl *rb)
{
	RedisModuleString **pairs = rb->v + rb->cap;
	int i, n = rb->n;

	if (n == 1 || (n > 1 && !no_replica(ctx))) {
		for (i = 0; i < n; i++)
			RedisModule_Replicate(ctx, "SET", "ssss", rb->v[i],
					      pairs[2 * i], pxat_word,
					      pairs[2 * i + 1]);
	} else if (n > 1) {
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
int sluice_rm_write_state(RedisModuleCtx *ctx, RedisModuleKey *k,
			  RedisModuleString *key, sluice_state_t state,
			  struct sluice_rm_repl *rb)
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
	SLUICE_ASSERT(rb->n < rb->cap);
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

void sluice_rm_close_keys(RedisModuleKey **k, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		RedisModule_CloseKey(k[i]);
}
