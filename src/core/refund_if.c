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

#include <string.h>

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

/* ------------------------------------------------------ the state token */

size_t sluice_states_format(const sluice_state_t *states, size_t n, char *out,
			    size_t outlen)
{
	char digits[24];
	size_t i, len = 0;

	if (outlen == 0)
		return 0;
	for (i = 0; i < n && i < SLUICE_MAX_LIMITS; i++) {
		uint64_t v = states[i] < 0 ? 0 : (uint64_t)states[i];
		size_t d = 0;

		do {
			digits[d++] = (char)('0' + v % 10);
			v /= 10;
		} while (v);
		if (len + (i > 0) + d + 1 > outlen) {
			out[0] = '\0';
			return 0;
		}
		if (i > 0)
			out[len++] = '.';
		while (d)
			out[len++] = digits[--d];
	}
	out[len] = '\0';
	return len;
}

int sluice_states_parse(const char *text, size_t len, size_t n,
			sluice_state_t *states)
{
	size_t i, at = 0;

	if (!text || n == 0 || n > SLUICE_MAX_LIMITS)
		return SLUICE_EINVAL;
	for (i = 0; i < n; i++) {
		uint64_t v = 0;
		size_t start = at;

		if (i > 0) {
			if (at >= len || text[at] != '.')
				return SLUICE_EINVAL;
			start = ++at;
		}
		while (at < len && text[at] >= '0' && text[at] <= '9') {
			unsigned dgt = (unsigned)(text[at] - '0');

			/* A state is an int64_t: no more than INT64_MAX. */
			if (v > ((uint64_t)INT64_MAX - dgt) / 10)
				return SLUICE_EINVAL;
			v = v * 10 + dgt;
			at++;
		}
		if (at == start || at - start > 19)
			return SLUICE_EINVAL;
		states[i] = (sluice_state_t)v;
	}
	return at == len ? 0 : SLUICE_EINVAL;
}
