/*
 * backend.h -- where the HTTP handlers get their decisions from.
 *
 * Two layers:
 *
 *   A *store driver* (sluice_store_ops_t) charges one key: the memory store
 *   here, the Redis store (include/sluice_redis.h) later.  Its take() has
 *   exactly the shape of sluice_redis_take(): asynchronous, one callback per
 *   call, which may run before take() returns (the memory driver always
 *   does).  Each event-loop thread owns its own driver instance.
 *
 *   The *backend* (sluice_backend_take()) decides a whole request: every
 *   matching rule, all-or-nothing across rules, shadow rules on the side,
 *   and the rule's on_store_error applied here and only here when the
 *   driver reports a failure (open: allow; closed: 503; local: decide on
 *   this instance's memory store instead).  Handlers never see a store
 *   error, only a verdict.
 *
 * All-or-nothing across rules: one rule is one store call (the store
 * charges all limits of one key atomically).  Several enforcing rules are
 * first peeked (cost 0) in parallel and then charged only if every one
 * would pass; under concurrent traffic on the same keys a bucket can change
 * between the peek and the charge, and the request is then rejected with
 * the other rules already charged -- the price of not locking keys across
 * a network store.
 */
#ifndef SLUICE_SERVE_BACKEND_H
#define SLUICE_SERVE_BACKEND_H

#include "serve/config.h"
#include "sluice.h"

#include <stddef.h>
#include <stdint.h>

/* Rules one request may match; further matches are ignored. */
#define SLUICE_MAX_MATCHES 16

/* ------------------------------------------------------- store drivers */

/* Same contract as sluice_redis_cb: status 0 or a negative SLUICE_E*;
 * summary and `which` (index of the limit) are valid when status is 0. */
typedef void (*sluice_store_cb)(void *arg, int status, int allowed,
				const sluice_decision_t *summary, size_t which);

typedef struct sluice_store_ops_s {
	const char *name; /* "memory", "redis" */
	/* Charges cost against all limits of key (cost 0 peeks).  Returns 0
	 * (cb will run, possibly already has) or a negative code (cb will
	 * not run). */
	int (*take)(void *impl, const void *key, size_t keylen,
		    const sluice_limit_t *limits, size_t nlimits, uint64_t cost,
		    sluice_store_cb cb, void *arg);
	/* 1 when the store can answer (for /readyz); NULL: always. */
	int (*healthy)(void *impl);
	/* Store-specific counters for /metrics, may be NULL. */
	void (*stats)(void *impl, sluice_memstore_stats_t *out);
	void (*free)(void *impl);
} sluice_store_ops_t;

/* ------------------------------------------------------------ backend */

typedef struct sluice_backend_s {
	const sluice_store_ops_t *ops;
	void *impl;
	/* The memory store for on_store_error: local (shared by threads;
	 * for the memory driver it is the store itself). */
	sluice_memstore_t *local;
} sluice_backend_t;

/* What became of one matched rule. */
typedef enum {
	SLUICE_OUT_ALLOWED = 0,
	SLUICE_OUT_LIMITED,
	SLUICE_OUT_ERROR_OPEN,	 /* store failed, rule fails open: allowed */
	SLUICE_OUT_ERROR_CLOSED, /* store failed, rule fails closed */
	SLUICE_OUT_SKIPPED,	 /* not charged: another rule rejected */
} sluice_outcome_t;

typedef struct sluice_match_result_s {
	sluice_outcome_t outcome;
	int decided;   /* 1 when `d` and `which` hold a real decision */
	int local;     /* decided by the local fallback store */
	int store_err; /* the store failed on this rule (any fail mode) */
	sluice_decision_t d;
	size_t which; /* the limit in the match's set that d describes */
} sluice_match_result_t;

/* The answer for a whole request. */
typedef struct sluice_verdict_s {
	int status; /* 0, or SLUICE_ESTORE: a fail-closed rule's store failed */
	int allowed; /* shadow rules never make this 0 */
	/* The decision to report (most restrictive among enforcing rules,
	 * or among shadow rules when only those matched); report < 0 when
	 * no rule produced a decision (nothing matched, or failed open). */
	int report;
	sluice_decision_t summary;
	size_t which; /* limit index within matches[report].set */
} sluice_verdict_t;

typedef void (*sluice_backend_cb)(void *arg, const sluice_verdict_t *v);

/*
 * One request in flight.  Owned by the caller (one per connection, since a
 * connection has at most one decision pending) and left untouched until the
 * callback.  The caller fills matches[], nmatches and costs[].
 */
typedef struct sluice_take_s {
	sluice_match_t matches[SLUICE_MAX_MATCHES];
	uint64_t costs[SLUICE_MAX_MATCHES];
	size_t nmatches;
	sluice_match_result_t results[SLUICE_MAX_MATCHES];
	/* For a request that brings its own limit (POST /v1/take): a rule
	 * the caller may point matches[0] at, alive as long as the take. */
	sluice_rule_t scratch_rule;

	/* private */
	sluice_backend_t *be;
	sluice_backend_cb cb;
	void *arg;
	int phase;
	size_t pending;
	int in_start; /* 1 while sluice_backend_take() is running */
	int finished; /* the verdict was delivered */
	struct sluice_take_call_s {
		struct sluice_take_s *t;
		size_t i;
	} calls[SLUICE_MAX_MATCHES];
	sluice_verdict_t verdict;
} sluice_take_t;

/* Opens the driver configured in `store` for one event-loop thread.
 * `shared` is the process-wide memory store.  Returns 0 or a negative code
 * with a message. */
int sluice_backend_open(sluice_backend_t *be,
			const sluice_store_config_t *store, void *loop,
			sluice_memstore_t *shared, char *err, size_t errlen);
void sluice_backend_close(sluice_backend_t *be);
int sluice_backend_healthy(sluice_backend_t *be);

/* The memory driver (backend_memory.c). */
extern const sluice_store_ops_t sluice_memory_store_ops;

/* The Redis driver (backend_redis.c): opens one Redis client for `loop`
 * (a uv_loop_t) into *impl. */
extern const sluice_store_ops_t sluice_redis_store_ops;
int sluice_redis_store_open(void **impl, const sluice_store_config_t *store,
			    void *loop, char *err, size_t errlen);

/*
 * Decides the request described by t->matches[0..nmatches).  cb runs
 * exactly once, possibly before this returns (always, with the memory
 * driver).
 */
void sluice_backend_take(sluice_backend_t *be, sluice_take_t *t,
			 sluice_backend_cb cb, void *arg);

#endif /* SLUICE_SERVE_BACKEND_H */
