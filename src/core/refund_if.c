/*
 * refund_if.c -- the conditional refund: giving a reservation back only
 * while nothing has been charged after it.
 *
 * An aborted reservation cannot simply be refunded.  Its charge moved the
 * bucket's state, and every reservation or take made after it was
 * decided on that moved state: a later reservation's turn is one refill
 * interval after ours.  Refunding ours then opens a gap of one interval
 * before that later turn, and the next request fits into it: one request
 * more than the limit in that interval.  While the stored state is still
 * exactly the one our reservation left, nobody has been decided on it,
 * so giving it back is exact (the bucket is as if the reservation had
 * never charged, less what time has refilled since).  When the state has
 * moved on, nothing is given back: the reserved turn goes unused, the
 * limit holds, and the cost is one turn of throughput, never the limit.
 */
#include "sluice.h"

int sluice_refund_if(const sluice_limit_t *limits, const sluice_state_t *states,
		     const sluice_state_t *expected, size_t n, int64_t now_us,
		     uint64_t cost, sluice_state_t *next)
{
	size_t i;
	int same = n > 0;

	if (n > SLUICE_MAX_LIMITS)
		n = SLUICE_MAX_LIMITS;
	/* A state is an absolute instant (the TAT) and a fraction: two
	 * equal states are the same bucket, whoever wrote them.  A state
	 * changed and changed back (a take then its refund) leaves the
	 * bucket as our reservation left it, so refunding stays exact.
	 * A reservation with a cost never leaves 0 (full): an expected 0
	 * is no reservation's, and matches nothing (the Redis stores hold
	 * no key for it). */
	for (i = 0; i < n; i++)
		if (states[i] != expected[i] || expected[i] == 0)
			same = 0;
	for (i = 0; i < n; i++)
		next[i] = same ? sluice_refund(&limits[i], states[i], now_us,
					       cost)
			       : states[i];
	return same;
}
