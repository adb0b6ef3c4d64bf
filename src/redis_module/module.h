/*
 * module.h -- what the files of sluice-redis.so share: the clock and the
 * command implementations registered by RedisModule_OnLoad().
 */
#ifndef SLUICE_REDIS_MODULE_H
#define SLUICE_REDIS_MODULE_H

#include <stdint.h>

#include "redis_module/redismodule_api.h"
#include "sluice.h"

/* The time a decision uses: the server's clock in microseconds since the
 * UNIX epoch, or the test clock when it is set (see SLUICE.TESTCLOCK). */
int64_t sluice_rm_now_us(void);

/* SLUICE.TESTCLOCK [us] (clock.c; registered only with TESTCLOCK). */
int sluice_rm_testclock(RedisModuleCtx *ctx, RedisModuleString **argv,
			int argc);

/* 1 when the argument is `word`, in any letter case (COST, cost): take.c. */
int sluice_rm_arg_is(RedisModuleString *arg, const char *word);

/* How states are read and written (state.c): the low-level key API with
 * int-encoded values as SET makes them, the low-level key API with embstr
 * values (public calls only), or GET and SET through RedisModule_Call. */
enum { SLUICE_RM_STORE_INT, SLUICE_RM_STORE_STRING, SLUICE_RM_STORE_CALL };
extern int sluice_rm_store;

/* 1 when the server's string objects are laid out as Redis 7.0 - 8.0 lay
 * them out (what SLUICE_RM_STORE_INT relies on). */
int sluice_rm_probe_objects(void);

/* Prefetching a batch's keys (prefetch.c): on (1) only on Redis 7.0 and
 * with int_store (STORE int), decided at load time. */
int sluice_rm_prefetch_init(int int_store);
int sluice_rm_prefetch_on(void);

/* Asks for the cache lines that deciding keys[0], keys[stride], ... (up to
 * 16 of the n) will read in db, the redisDb of an open key handle. */
void sluice_rm_prefetch(void *db, RedisModuleString **keys, int stride, int n);

/* ------------------------------------------------ states (state.c) */

/* What the writes keep for the module's life; 0 or -1 (memory). */
int sluice_rm_state_init(void);

/*
 * Opens key for reading and writing and reads its state (0 when there is
 * no key).  *kp is the open key, to be closed by the caller, or NULL in
 * SLUICE_RM_STORE_CALL mode.  Replies with the error and returns -1 when
 * the key holds something else (*kp is then closed and NULL).
 */
int sluice_rm_open_state(RedisModuleCtx *ctx, RedisModuleString *key,
			 RedisModuleKey **kp, sluice_state_t *state);

/* Closes the n keys (NULL ones too). */
void sluice_rm_close_keys(RedisModuleKey **k, size_t n);

/* The redisDb of the last key opened with a handle laid out as expected
 * (STORE int), for prefetch.c; NULL after sluice_rm_forget_db() until
 * then. */
void *sluice_rm_opened_db(void);
void sluice_rm_forget_db(void);

/*
 * The writes of one batch command, replicated when it ends
 * (sluice_rm_repl_flush()).  v holds the keys at [0, cap) and a (state,
 * expiry) pair per key from cap on: the EVAL's KEYS and ARGV once the
 * pairs are moved next to the n keys.  Keys are the command's arguments
 * (alive until it returns); states and expiries are references the batch
 * holds.
 */
struct sluice_rm_repl {
	RedisModuleString **v;
	int cap, n;
	long long last_exp_ms; /* the expiry object of the last write */
};

/* A batch for at most cap writes; v (3 * cap pointers) is the caller's. */
void sluice_rm_repl_init(struct sluice_rm_repl *rb, RedisModuleString **v,
			 int cap);

/* Replicates and releases what the batch gathered. */
void sluice_rm_repl_flush(RedisModuleCtx *ctx, struct sluice_rm_repl *rb);

/*
 * Stores a state in the open key k (or with SET when k is NULL) until its
 * bucket is full again, with the effects of SET key state PXAT ms, and
 * replicates that SET now (rb NULL) or gathers it in rb.  0, or -1 after
 * replying with an error.
 */
int sluice_rm_write_state(RedisModuleCtx *ctx, RedisModuleKey *k,
			  RedisModuleString *key, sluice_state_t state,
			  struct sluice_rm_repl *rb);

/* ------------------------------------------------ commands (take.c) */

/* SLUICE.TAKE key capacity rate [COST n] */
int sluice_rm_take(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* SLUICE.TAKEMULTI numkeys key [key ...] capacity rate [...] [COST n] */
int sluice_rm_takemulti(RedisModuleCtx *ctx, RedisModuleString **argv,
			int argc);

/* SLUICE.TAKEMANY key capacity rate cost [key capacity rate cost ...] */
int sluice_rm_takemany(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* SLUICE.TAKEEACH capacity rate cost key [key ...] */
int sluice_rm_takeeach(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* Parses one capacity + rate pair as SLUICE.TAKE does; replies with the
 * parser's message and returns -1 on bad input (take.c). */
int sluice_rm_parse_limit(RedisModuleCtx *ctx, RedisModuleString *capacity,
			  RedisModuleString *rate, sluice_limit_t *limit);

/* A quota's "capacity rate", rate "@<unit>[:<zone>|:first_use]"
 * (quota.c): 0, or -1 with the reason in err. */
int sluice_rm_quota_parse(const char *capacity, const char *rate,
			  sluice_limit_t *limit, char *err, size_t errlen);

/* SLUICE.CARRY key capacity rate from_key from_capacity from_rate [...]
 * (carry.c) */
int sluice_rm_carry(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* SLUICE.RESERVE key capacity rate max_wait_us [COST n] */
int sluice_rm_reserve(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
int sluice_rm_refund_if(RedisModuleCtx *ctx, RedisModuleString **argv,
			int argc);

#endif /* SLUICE_REDIS_MODULE_H */
