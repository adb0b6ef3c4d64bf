/*
 * sluice_reserve.h -- reservations: waiting for a turn instead of being
 * refused, exact across every process on one store; and setting a
 * bucket's tokens.  Part of libsluice's core: include sluice.h, which
 * includes this after the types it uses.
 */
#ifndef SLUICE_RESERVE_H
#define SLUICE_RESERVE_H

#ifndef SLUICE_H
#error "include sluice.h, which includes sluice_reserve.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------- reservations */

/* The longest wait a reservation accepts, about 12.7 days: a longer
 * max_wait is this.  It keeps every debt a reservation leaves inside the
 * exact range (sluice_debt_max_units()). */
#define SLUICE_WAIT_MAX_US (UINT64_C(1) << 40)

/*
 * Reserves `cost` tokens of every limit at once, for a caller that would
 * rather wait for its turn than be refused (a worker calling someone
 * else's API).  Where sluice_eval_all() refuses, a reservation charges
 * anyway, letting the buckets go into debt, and answers the wait until
 * the request's turn: the first instant at which the charge would have
 * been allowed.  One GCRA step: the turn is the theoretical arrival time
 * the charge leaves, less the time from empty to full, so reservations in
 * any number of processes on one store are spaced exactly by the refill,
 * each told its own turn, with no retries.  With several limits the turn
 * is the latest of theirs, and each limit is charged at that instant
 * (its state moves to max(TAT, turn) + cost), so no limit counts the
 * request earlier than it runs.
 *
 * Refused, charging nothing, when the turn is later than max_wait_us from
 * now (capped at SLUICE_WAIT_MAX_US), when the cost exceeds a capacity
 * (never), or when a debt would pass sluice_debt_max_units().  A cost of
 * 0 charges nothing and answers the wait until every bucket is out of
 * debt.
 *
 * Writes next[i] (the states to commit: the charged ones when reserved,
 * states[i] when refused), *wait_us (may be NULL: reserved, the time from
 * now_us to the turn, 0 when it is now; refused, the turn it would have
 * had, UINT64_MAX for never) and *summary (may be NULL): the decision of
 * the limit whose turn is the latest (summary->which; among equal turns
 * the fewest remaining): allowed is 1 when reserved; remaining and
 * reset_after_us as the charge leaves the bucket (remaining 0 in debt);
 * retry_after_us is the wait when reserved, and when refused the time
 * until a reservation with the same max_wait would pass (UINT64_MAX:
 * never).  Pure, like sluice_eval().  Returns 1 when reserved, 0 when
 * refused.
 */
SLUICE_API int sluice_reserve_all(const sluice_limit_t *limits,
				  const sluice_state_t *states, size_t n,
				  int64_t now_us, uint64_t cost,
				  uint64_t max_wait_us, sluice_state_t *next,
				  sluice_decision_t *summary,
				  uint64_t *wait_us);

/* What a store answers for a reservation (the Redis store, the store
 * drivers): sluice_reserve_all()'s answer, with the store's clock. */
typedef struct sluice_reservation_s {
	int reserved;	  /* 1: charged, the turn within max_wait */
	uint64_t wait_us; /* reserved: from now_us to the turn; refused: the
			     turn it would have had (UINT64_MAX: never) */
	int64_t now_us;	  /* the store's clock at the decision (Redis: the
			     server's TIME), so now_us + wait_us is the
			     turn on one clock for every caller */
	sluice_decision_t summary; /* sluice_reserve_all()'s summary */
	/* Reserved with a cost: the state each bucket holds right after
	 * the charge (states[i] for the caller's limits[i]), the `expected`
	 * of a conditional refund (sluice_refund_if()).  0 otherwise. */
	sluice_state_t states[SLUICE_MAX_LIMITS];
} sluice_reservation_t;

/* ---------------------------------------------------- conditional refund */

/*
 * Gives `cost` back to every bucket (sluice_refund() on states[i]) only
 * when each states[i] is still expected[i], the state a reservation left
 * (sluice_reservation_t.states): a cancelled reservation that nobody has
 * been decided after.  Writes next[i] (states[i] when not refunded) and
 * returns 1 when refunded, 0 when not.
 *
 * Why not always: every reservation or take after ours was decided on
 * the state ours left (a later turn is one interval after ours), so a
 * refund then would open a gap before that turn and let one request more
 * than the limit through.  When any state moved on, nothing is given
 * back: the reserved turn goes unused (throughput lost, the limit kept).
 * A bucket reclaimed since (full again) no longer holds the state, so it
 * is not refunded either; nothing is lost by that, it is full.  An
 * expected state of 0 (no reservation with a cost leaves one) never
 * matches, nor does n 0.  Pure, like sluice_eval().
 */
SLUICE_API int sluice_refund_if(const sluice_limit_t *limits,
				const sluice_state_t *states,
				const sluice_state_t *expected, size_t n,
				int64_t now_us, uint64_t cost,
				sluice_state_t *next);

/*
 * The states of a reservation as text, for a caller that hands them on
 * (the `state` of `/v1/take` with max_wait_ms, the Node package's token):
 * each state in decimal, joined by '.', as "1733451234567890123" or
 * "1733451234567890123.1733451234567890456".  sluice_states_format()
 * writes states[0..n) into out (NUL-terminated; SLUICE_STATES_TEXT_MAX
 * bytes always suffice) and returns its length, 0 when outlen is too
 * small.  sluice_states_parse() reads exactly n states from text[0..len)
 * (nothing else: no sign, space or leading '+'), 0 or SLUICE_EINVAL.
 */
#define SLUICE_STATES_TEXT_MAX (SLUICE_MAX_LIMITS * 21)
SLUICE_API size_t sluice_states_format(const sluice_state_t *states, size_t n,
				       char *out, size_t outlen);
SLUICE_API int sluice_states_parse(const char *text, size_t len, size_t n,
				   sluice_state_t *states);

/*
 * As sluice_memstore_reserve(), also writing left[i] (may be NULL), the
 * state each bucket of limits[i] holds after the reservation (0 unless
 * reserved with a cost): what sluice_memstore_refund_if() expects.
 */
SLUICE_API int sluice_memstore_reserve_left(
	sluice_memstore_t *store, const void *key, size_t keylen,
	const sluice_limit_t *limits, size_t nlimits, uint64_t cost,
	uint64_t max_wait_us, int64_t now_us, sluice_decision_t *summary,
	uint64_t *wait_us, sluice_state_t *left);

/*
 * Gives `cost` back to every bucket of `key` under limits[0..nlimits)
 * only while each still holds expected[i] (sluice_refund_if()), under the
 * key's lock: an aborted reservation given back when nothing was charged
 * after it.  Returns 1 when refunded, 0 when not (nothing changed), or
 * SLUICE_EINVAL as sluice_memstore_take().
 */
SLUICE_API int sluice_memstore_refund_if(sluice_memstore_t *store,
					 const void *key, size_t keylen,
					 const sluice_limit_t *limits,
					 size_t nlimits, uint64_t cost,
					 const sluice_state_t *expected,
					 int64_t now_us);

/* As sluice_memstore_reserve_left() and sluice_memstore_refund_if(), for
 * every process on the same file (sluice_shmstore_reserve()). */
SLUICE_API int sluice_shmstore_reserve_left(
	sluice_shmstore_t *store, const void *key, size_t keylen,
	const sluice_limit_t *limits, size_t nlimits, uint64_t cost,
	uint64_t max_wait_us, int64_t now_us, sluice_decision_t *summary,
	uint64_t *wait_us, sluice_state_t *left);
SLUICE_API int sluice_shmstore_refund_if(sluice_shmstore_t *store,
					 const void *key, size_t keylen,
					 const sluice_limit_t *limits,
					 size_t nlimits, uint64_t cost,
					 const sluice_state_t *expected,
					 int64_t now_us);

/*
 * The state of a bucket that holds `remaining` whole tokens at now_us, no
 * fraction of one refilled (an admin's "set"): full (0) when remaining is
 * the capacity or more.  Pure, like sluice_eval().
 */
SLUICE_API sluice_state_t sluice_set_remaining(const sluice_limit_t *limit,
					       int64_t now_us,
					       uint64_t remaining);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_RESERVE_H */
