/*
 * envoy_units.c -- Envoy's rate limit units, and the token bucket that
 * "requests_per_unit N per unit U" becomes: capacity N (or burst),
 * refilling N per U, kept exact where the rate allows.
 */
#include "policy/envoy_config.h"

#include <stdio.h>
#include <strings.h>

/* ---------------------------------------------------------------- units */

static const struct {
	const char *name;
	sluice_rls_unit_t unit;
	uint64_t seconds;
} units[] = {
	{"SECOND", SLUICE_RLS_UNIT_SECOND, 1},
	{"MINUTE", SLUICE_RLS_UNIT_MINUTE, 60},
	{"HOUR", SLUICE_RLS_UNIT_HOUR, 3600},
	{"DAY", SLUICE_RLS_UNIT_DAY, 86400},
	{"WEEK", SLUICE_RLS_UNIT_WEEK, 7 * 86400},
	{"MONTH", SLUICE_RLS_UNIT_MONTH, 30 * 86400},
	{"YEAR", SLUICE_RLS_UNIT_YEAR, 365 * 86400},
};
#define NUNITS (sizeof(units) / sizeof(units[0]))

uint64_t sluice_envoy_unit_seconds(sluice_rls_unit_t unit)
{
	size_t i;

	for (i = 0; i < NUNITS; i++)
		if (units[i].unit == unit)
			return units[i].seconds;
	return 0;
}

const char *sluice_envoy_unit_name(sluice_rls_unit_t unit)
{
	size_t i;

	for (i = 0; i < NUNITS; i++)
		if (units[i].unit == unit)
			return units[i].name;
	return "UNKNOWN";
}

sluice_rls_unit_t sluice_envoy_unit_parse(const char *name)
{
	size_t i;

	for (i = 0; i < NUNITS; i++)
		if (strcasecmp(units[i].name, name) == 0)
			return units[i].unit;
	return SLUICE_RLS_UNIT_UNKNOWN;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/*
 * A rate sluice cannot hold exactly (one token every S/N seconds needs
 * finer steps than 1/1000 us, or a bucket's time to refill would not fit
 * the exact range at that step) is rounded to the nearest interval of the
 * finest step that fits: 1/1000 us, else 1/100, 1/10, 1 us.  Any
 * requests_per_unit envoyproxy/ratelimit takes loads; the rounding moves
 * each token's interval by at most half a step (a year's refill needs
 * steps of 1/100 us to fit the exact range).  Above 10^9 a second (a
 * token more often than every 1/1000 us, which rounds to no interval at
 * all), the bucket refills at 10^9 a second, the finest rate there is:
 * its capacity stays requests_per_unit, and it never lets through more
 * than the rule asks.
 */
static int rounded(uint32_t n, uint64_t secs, uint64_t capacity,
		   sluice_limit_t *out, char *err, size_t errlen)
{
	static const uint32_t steps[] = {1000, 100, 10, 1};
	size_t i;

	for (i = 0; i < 4; i++) {
		/* secs * 10^6 * per / n, rounded; secs <= 3.2e7, so the
		 * product stays below 2^64. */
		uint64_t steps_total = secs * 1000000u * steps[i];
		uint64_t interval = (steps_total + n / 2) / n, g;
		sluice_rate_t rate;

		if (!interval && i > 0)
			continue;
		if (!interval)
			interval = 1; /* the finest rate: see above */
		g = gcd(interval, steps[i]);
		rate.interval = interval / g;
		rate.per = (uint32_t)(steps[i] / g);
		if (sluice_limit_init(out, capacity, &rate, err, errlen) == 0)
			return 0;
	}
	return SLUICE_ERANGE; /* err holds the last reason */
}

int sluice_envoy_limit_make(uint32_t requests_per_unit, sluice_rls_unit_t unit,
			    uint64_t burst, sluice_limit_t *out, char *err,
			    size_t errlen)
{
	uint64_t secs = sluice_envoy_unit_seconds(unit);
	uint64_t capacity = burst ? burst : requests_per_unit;
	sluice_rate_t rate;
	char text[64];

	if (!secs || !requests_per_unit) {
		snprintf(err, errlen, "%s", !secs ? "no unit" : "no requests");
		return SLUICE_EINVAL;
	}
	/* "N/Ss": N tokens every S seconds, reduced to lowest terms. */
	snprintf(text, sizeof(text), "%u/%llus", requests_per_unit,
		 (unsigned long long)secs);
	if (sluice_rate_parse(text, &rate, err, errlen) == 0 &&
	    sluice_limit_init(out, capacity, &rate, err, errlen) == 0)
		return 0;
	return rounded(requests_per_unit, secs, capacity, out, err, errlen);
}
