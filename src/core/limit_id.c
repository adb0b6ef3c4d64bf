/*
 * limit_id.c -- the identity of a limit, which names its bucket.
 *
 * A key's bucket for one limit is identified by the limit itself, never by
 * its position among the key's limits: a tier gaining or losing a limit, a
 * client switching tiers, or two callers that put different limits on the
 * same key must never read or reset each other's state.  Stores therefore
 * name a bucket by key + limit id, and every store (memory, Redis script,
 * Redis module) uses the same id.
 */
#include "sluice.h"
#include "util/num.h"

#include <stdio.h>

size_t sluice_limit_id(const sluice_limit_t *limit,
		       char buf[SLUICE_LIMIT_ID_MAX])
{
	sluice_rate_t rate = limit->rate;
	uint64_t g;
	int n;

	if (rate.interval == 0 || rate.per == 0) {
		buf[0] = '\0'; /* not a limit: no id */
		return 0;
	}
	g = sluice_gcd(rate.interval, rate.per);

	/* A hand-built limit may not be in lowest terms: reduce, so that
	 * equal limits always get equal ids.  The rate's canonical text is
	 * one spelling per rate, and it parses back to the rate, so two
	 * different limits never share an id. */
	if (g > 1) {
		rate.interval /= g;
		rate.per /= (uint32_t)g;
	}
	n = snprintf(buf, SLUICE_LIMIT_ID_MAX, "%llu@",
		     (unsigned long long)limit->capacity);
	n += sluice_rate_format(&rate, buf + n,
				SLUICE_LIMIT_ID_MAX - (size_t)n);
	/* A valid limit needs at most 40 bytes; one out of range is cut
	 * short rather than overrun the buffer. */
	if (n >= SLUICE_LIMIT_ID_MAX)
		n = SLUICE_LIMIT_ID_MAX - 1;
	return (size_t)n;
}

int sluice_limit_valid(const sluice_limit_t *l)
{
	/* tau = capacity * interval <= 2^52, with capacity and interval >= 1
	 * (so nothing downstream divides by zero); no division here. */
	return l->capacity >= 1 && l->rate.interval >= 1 &&
	       l->rate.per - 1u < SLUICE_RATE_PER_MAX &&
	       l->tau <= SLUICE_UNITS_MAX &&
	       (unsigned __int128)l->capacity * l->rate.interval == l->tau;
}

int sluice_limit_same(const sluice_limit_t *a, const sluice_limit_t *b)
{
	/* Cross-multiplied: equal rates in any terms. */
	return a->capacity == b->capacity &&
	       (unsigned __int128)a->rate.interval * b->rate.per ==
		       (unsigned __int128)b->rate.interval * a->rate.per;
}
