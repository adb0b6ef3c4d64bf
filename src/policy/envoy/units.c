/*
 * units.c -- Envoy's rate limit units, and the token bucket that
 * "requests_per_unit N per unit U" becomes: capacity N (or burst),
 * refilling N per U, kept exact where the rate allows; or, with
 * `envoy: {windows: calendar}`, the calendar quota it becomes: N per UTC
 * window of U, as envoyproxy/ratelimit's fixed windows count.
 */
#include "policy/envoy/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ------------------------------------------------------ calendar windows */

int sluice_envoy_quota_make(uint32_t requests_per_unit, sluice_rls_unit_t unit,
			    sluice_limit_t *out, char *err, size_t errlen)
{
	static const struct {
		sluice_rls_unit_t unit;
		uint8_t per;
	} pers[] = {
		{SLUICE_RLS_UNIT_SECOND, SLUICE_PER_SECOND},
		{SLUICE_RLS_UNIT_MINUTE, SLUICE_PER_MINUTE},
		{SLUICE_RLS_UNIT_HOUR, SLUICE_PER_HOUR},
		{SLUICE_RLS_UNIT_DAY, SLUICE_PER_DAY},
		{SLUICE_RLS_UNIT_WEEK, SLUICE_PER_WEEK},
		{SLUICE_RLS_UNIT_MONTH, SLUICE_PER_MONTH},
		{SLUICE_RLS_UNIT_YEAR, SLUICE_PER_YEAR},
	};
	size_t i;

	for (i = 0; i < sizeof(pers) / sizeof(pers[0]); i++)
		if (pers[i].unit == unit)
			return sluice_quota_init(
				out, requests_per_unit, pers[i].per,
				SLUICE_ALIGN_CALENDAR, 0, err, errlen);
	snprintf(err, errlen, "no unit");
	return SLUICE_EINVAL;
}

int sluice_envoy_calendar(const sluice_envoy_settings_t *s, const char *domain)
{
	const char *p;
	size_t n;

	if (s->windows_calendar)
		return 1;
	if (!s->calendar_domains || !domain)
		return 0;
	n = strlen(domain);
	if (n == 0)
		return 0;
	for (p = s->calendar_domains; (p = strstr(p, domain)); p++)
		if (p > s->calendar_domains && p[-1] == '\n' && p[n] == '\n')
			return 1;
	return 0;
}

/* {calendar: [domain, ...]} */
static int parse_domains(sluice_yaml_t *y, yaml_node_t *v,
			 sluice_envoy_settings_t *s)
{
	static const char *const keys[] = {"calendar", NULL};
	yaml_node_t *list;
	sluice_buf_t b = {0};
	size_t i, n;
	int rc = 0;

	if (sluice_yaml_check_keys(y, v, "envoy.windows", keys) < 0)
		return -1;
	list = sluice_yaml_get(y, v, "calendar");
	if (!list)
		return sluice_yaml_error(y, v,
					 "envoy.windows has no calendar; "
					 "expected {calendar: [domain, ...]}");
	if (sluice_yaml_expect_seq(y, list, "envoy.windows.calendar") < 0)
		return -1;
	n = sluice_yaml_seq_len(list);
	sluice_buf_puts(&b, "\n");
	for (i = 0; i < n; i++) {
		yaml_node_t *it = sluice_yaml_seq_at(y, list, i);
		const char *d;

		if (sluice_yaml_string(y, it, "envoy.windows.calendar entry",
				       &d) < 0) {
			rc = -1;
			continue;
		}
		if (!*d || strchr(d, '\n')) {
			rc = sluice_yaml_error(
				y, it,
				"envoy.windows.calendar entry "
				"is not a domain name; expected "
				"a domain of config_dir's files");
			continue;
		}
		sluice_buf_puts(&b, d);
		sluice_buf_puts(&b, "\n");
	}
	sluice_buf_append(&b, "", 1);
	if (b.oom)
		rc = sluice_yaml_nomem(y, v);
	if (rc == 0) {
		free(s->calendar_domains);
		s->calendar_domains = strdup(b.data);
		if (!s->calendar_domains)
			rc = sluice_yaml_nomem(y, v);
	}
	sluice_buf_free(&b);
	return rc;
}

int sluice_envoy_parse_windows(sluice_yaml_t *y, yaml_node_t *v,
			       sluice_envoy_settings_t *s)
{
	const char *text;

	if (v->type == YAML_MAPPING_NODE)
		return parse_domains(y, v, s);
	if (sluice_yaml_string(y, v, "envoy.windows", &text) < 0)
		return -1;
	if (strcmp(text, "calendar") == 0)
		s->windows_calendar = 1;
	else if (strcmp(text, "buckets") == 0)
		s->windows_calendar = 0;
	else
		return sluice_yaml_error(y, v,
					 "envoy.windows is \"%.40s\"; expected "
					 "buckets, calendar or {calendar: "
					 "[domain, ...]}",
					 text);
	return 0;
}
