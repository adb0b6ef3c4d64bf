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
#include "core/decide.h"
#include "sluice.h"
#include "util/num.h"

#include <stdio.h>
#include <string.h>

/* The rate of a limit id as sluice_rate_format() writes it when one of
 * its units holds a whole count ("2/s", "50/min"): the Redis client names
 * every bucket it touches by its limit id, once per call, and snprintf was
 * most of that.  0 for the rates it leaves to sluice_rate_format(). */
static size_t rate_whole(const sluice_rate_t *rate, char *buf)
{
	/* sluice_rate_format()'s units, in its order. */
	static const struct {
		const char *name;
		size_t len;
		uint64_t us;
	} unit[] = {{"s", 1, 1000000},
		    {"min", 3, 60000000},
		    {"h", 1, 3600000000},
		    {"day", 3, 86400000000}};
	size_t i, n;

	/* per <= SLUICE_RATE_PER_MAX: us * per fits in 64 bits. */
	if (rate->per > SLUICE_RATE_PER_MAX)
		return 0;
	for (i = 0; i < sizeof(unit) / sizeof(unit[0]); i++) {
		uint64_t tok = unit[i].us * rate->per;

		if (tok % rate->interval == 0) {
			n = sluice_u64_dec(buf, tok / rate->interval);
			buf[n++] = '/';
			memcpy(buf + n, unit[i].name, unit[i].len + 1);
			return n + unit[i].len;
		}
	}
	return 0;
}

/* A quota's id: "<quota>@<unit>", then ":<zone>" for a calendar in a
 * zone other than UTC or ":first_use" ("3@day:Europe/Berlin").  The zone
 * is named, never numbered: ids differ between processes, names do not.
 * No "/" follows the "@", so no bucket's id is ever one. */
static size_t quota_id(const sluice_limit_t *limit,
		       char buf[SLUICE_LIMIT_ID_MAX])
{
	const char *unit = sluice_per_name(limit->window.per);
	const char *zone = NULL;
	size_t n;
	int r;

	if (limit->window.align == SLUICE_ALIGN_FIRST_USE)
		zone = "first_use";
	else if (limit->window.zone != 0)
		zone = sluice_zone_name(limit->window.zone);
	n = sluice_u64_dec(buf, limit->capacity);
	r = snprintf(buf + n, SLUICE_LIMIT_ID_MAX - n, "@%s%s%s",
		     *unit ? unit : "?", zone ? ":" : "",
		     zone ? (*zone ? zone : "?") : "");
	n += r > 0 ? (size_t)r : 0;
	/* Every valid quota fits (zone names are at most 46 bytes). */
	if (n >= SLUICE_LIMIT_ID_MAX)
		n = SLUICE_LIMIT_ID_MAX - 1;
	return n;
}

size_t sluice_limit_id(const sluice_limit_t *limit,
		       char buf[SLUICE_LIMIT_ID_MAX])
{
	sluice_rate_t rate = limit->rate;
	uint64_t g;
	size_t n, r;

	if (sluice_limit_is_quota(limit))
		return quota_id(limit, buf);
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
	/* "<capacity>@": at most 21 bytes. */
	n = sluice_u64_dec(buf, limit->capacity);
	buf[n++] = '@';
	if ((r = rate_whole(&rate, buf + n)) > 0)
		return n + r;
	n += (size_t)sluice_rate_format(&rate, buf + n,
					SLUICE_LIMIT_ID_MAX - n);
	/* A valid limit needs at most 40 bytes; one out of range is cut
	 * short rather than overrun the buffer. */
	if (n >= SLUICE_LIMIT_ID_MAX)
		n = SLUICE_LIMIT_ID_MAX - 1;
	return n;
}

int sluice_limit_valid(const sluice_limit_t *l)
{
	return sluice_limit_valid_inline(l);
}

int sluice_limit_same(const sluice_limit_t *a, const sluice_limit_t *b)
{
	/* A quota is the same as a quota of the same count, unit,
	 * alignment and zone, never as a bucket. */
	if (sluice_limit_is_quota(a) || sluice_limit_is_quota(b))
		return a->capacity == b->capacity &&
		       a->window.per == b->window.per &&
		       a->window.align == b->window.align &&
		       a->window.zone == b->window.zone;
	/* Cross-multiplied: equal rates in any terms. */
	return a->capacity == b->capacity &&
	       (unsigned __int128)a->rate.interval * b->rate.per ==
		       (unsigned __int128)b->rate.interval * a->rate.per;
}
