/*
 * verdict.h -- one request's verdict: the one place that decides it.
 *
 * `sluice serve` (over its configured store), `sluice simulate` and
 * `sluice replay` (over a memory store, on simulated or logged time) all
 * decide requests here, so their answers agree by construction.
 *
 *   every matching rule   evaluated, however many match (the take's
 *                         arrays grow to the config's rule count)
 *   enforcing rules       charged together in ONE store call, all or
 *                         nothing: the store charges every rule's key or
 *                         none (sluice_store_ops_t.take), so concurrent
 *                         requests can never leave one rule charged for a
 *                         request another rule rejected
 *   shadow rules          each charged on its own; rejections counted,
 *                         never enforced
 *   on_store_error        applied here and only here when the store call
 *                         fails: open allows, closed answers 503, local
 *                         decides the failed rules on this instance's
 *                         memory store (again all or nothing).  Handlers
 *                         never see a store error, only a verdict.
 *
 * The clock is the caller's: serve passes the wall clock, simulate and
 * replay the request's simulated or logged time (a Redis store uses the
 * server's own clock whatever is passed).
 */
#ifndef SLUICE_POLICY_VERDICT_H
#define SLUICE_POLICY_VERDICT_H

#include "policy/config/config.h"
#include "store/store.h"
#include "util/buf.h"

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

typedef void (*sluice_verdict_cb)(void *arg, const sluice_verdict_t *v);

struct sluice_svc_s;	/* svc.h */
struct sluice_live_s;	/* live.h */
struct sluice_answer_s; /* request.h */

/*
 * One request in flight.  Owned by the caller (one per connection, since a
 * connection has at most one decision pending) and left untouched until the
 * callback.  The caller fills matches[], nmatches and costs[] (room for
 * `cap`, see sluice_take_reserve()), or lets sluice_take_match() do it.
 */
typedef struct sluice_take_s {
	sluice_match_t *matches;
	uint64_t *costs;
	sluice_match_result_t *results;
	size_t nmatches;
	size_t cap;
	/* For a request that brings its own limit (POST /v1/take): a rule
	 * the caller may point matches[0] at, alive as long as the take. */
	sluice_rule_t scratch_rule;

	/* private */
	sluice_take_item_t *items; /* enforcing rules first, then shadow */
	size_t *order;		   /* items[k] is matches[order[k]] */
	struct sluice_take_call_s {
		struct sluice_take_s *t;
		size_t first, n; /* items[first .. first + n) */
	} * calls;
	sluice_backend_t *be;
	int64_t now_us;
	sluice_verdict_cb cb;
	void *arg;
	size_t pending;
	int finished; /* the verdict was delivered */
	sluice_verdict_t verdict;
	/* sluice_decide_request()'s (request.h), which gives the engine a
	 * callback of its own: the thread, the config, the front end's
	 * callback.  Untouched here. */
	struct sluice_svc_s *svc;
	const struct sluice_live_s *live;
	void (*answer_cb)(void *arg, const struct sluice_answer_s *a);
	void *answer_arg;
} sluice_take_t;

/* A take with room for a few matches; NULL when out of memory. */
sluice_take_t *sluice_take_new(void);
void sluice_take_free(sluice_take_t *t);
/* Makes room for n matches (keeps those filled).  0 or SLUICE_ENOMEM. */
int sluice_take_reserve(sluice_take_t *t, size_t n);

/*
 * Fills matches[], costs[] and nmatches with every rule of cfg that
 * applies to req (growing the take as needed: no match is ever dropped).
 * Returns 0 or SLUICE_ENOMEM.
 */
int sluice_take_match(sluice_take_t *t, const sluice_config_t *cfg,
		      const sluice_request_t *req);

/*
 * Carries key's usage to the limits of `set` that a reload changed, from
 * their earlier limits still kept at now_us (set->carry: the store's carry
 * verb, before whatever the host does next on the same driver).  Nothing
 * when set is NULL, nothing changed, or the store cannot carry.
 * sluice_verdict_decide() calls it for each match; an admin verb calls it
 * before resetting or refunding, so that usage kept under an earlier
 * limit is reset or refunded too, not carried back later.
 */
void sluice_verdict_carry(sluice_backend_t *be, const sluice_limit_set_t *set,
			  const void *key, size_t keylen, int64_t now_us);

/*
 * Decides the request described by t->matches[0..nmatches) at now_us.  cb
 * runs exactly once, possibly before this returns (always, with the memory
 * driver).
 */
void sluice_verdict_decide(sluice_backend_t *be, sluice_take_t *t,
			   int64_t now_us, sluice_verdict_cb cb, void *arg);

/*
 * Appends to `out` the rate-limit header lines ("Name: value\r\n" each,
 * policy/ratelimit_headers.h) that every front end sends with the verdict
 * of take t: the reported rule's, under its policy name; nothing when no
 * rule produced a decision or the one reported is a shadow rule (a shadow
 * rule never limits: a client must not read "Remaining: 0" from it).
 * `out->oom` says when memory ran out.
 */
void sluice_verdict_header_lines(sluice_buf_t *out, const sluice_take_t *t,
				 const sluice_verdict_t *v);

/*
 * Gives back what an allowed verdict charged to its enforcing rules on the
 * store (not the local fallback, not shadow rules, which count whatever
 * becomes of the request), for a front end whose other limits then refuse
 * the request: it is charged all or nothing.  Call it after the verdict
 * was delivered; a store that answers later must copy what it borrows.
 */
void sluice_verdict_refund(sluice_backend_t *be, sluice_take_t *t,
			   int64_t now_us);

#endif /* SLUICE_POLICY_VERDICT_H */
