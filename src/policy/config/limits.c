/*
 * limits.c -- a list of limits, [{capacity: 100, rate: 2/s}, ...],
 * as a rule, a tier and an override give them.  A limit is a token bucket
 * ({capacity, rate}) or a calendar quota ({quota: 10000, per: month},
 * with align: calendar | first_use and tz: an IANA zone, see
 * sluice_quota.h); one list may mix the two.
 */
#include "policy/config/internal.h"

#include <stdio.h>
#include <string.h>

/* The library's messages read "what: expected ..."; ours separate the
 * expectation with a semicolon. */
static void semicolon(char *msg)
{
	char *p = strstr(msg, ": expected");

	if (p)
		*p = ';';
}

/* {quota: N, per: UNIT, align: calendar|first_use, tz: ZONE} */
static int parse_quota(sluice_yaml_t *y, yaml_node_t *node,
		       sluice_limit_t *limit, const char *what)
{
	static const char *const bucket_keys[] = {"capacity", "rate", NULL};
	yaml_node_t *q = sluice_yaml_get(y, node, "quota");
	yaml_node_t *per = sluice_yaml_get(y, node, "per");
	yaml_node_t *align = sluice_yaml_get(y, node, "align");
	yaml_node_t *tz = sluice_yaml_get(y, node, "tz"), *v;
	uint64_t quota;
	uint8_t unit, al = SLUICE_ALIGN_CALENDAR;
	uint16_t zone = 0;
	const char *text;
	char msg[384], field[320];
	size_t i;

	for (i = 0; bucket_keys[i]; i++)
		if ((v = sluice_yaml_get_key(y, node, bucket_keys[i])))
			return sluice_yaml_error(
				y, v,
				"%s mixes quota with %s; expected a quota "
				"({quota: 10000, per: month}) or a token "
				"bucket ({capacity: 100, rate: 2/s}), one "
				"limit each",
				what, bucket_keys[i]);
	if (!per)
		return sluice_yaml_error(y, node,
					 "%s has no per; expected {quota: "
					 "10000, per: month}",
					 what);
	snprintf(field, sizeof(field), "%s.quota", what);
	if (sluice_yaml_uint(y, q, field, 1, SLUICE_QUOTA_MAX, &quota) < 0)
		return -1;
	snprintf(field, sizeof(field), "%s.per", what);
	if (sluice_yaml_string(y, per, field, &text) < 0)
		return -1;
	if (sluice_per_parse(text, &unit, msg, sizeof(msg)) < 0)
		return sluice_yaml_error(y, per,
					 "%s.per is \"%.40s\", not a unit; "
					 "expected second, minute, hour, day, "
					 "week, month or year",
					 what, text);
	if (align) {
		snprintf(field, sizeof(field), "%s.align", what);
		if (sluice_yaml_string(y, align, field, &text) < 0)
			return -1;
		if (strcmp(text, "first_use") == 0)
			al = SLUICE_ALIGN_FIRST_USE;
		else if (strcmp(text, "calendar") != 0)
			return sluice_yaml_error(y, align,
						 "%s: align \"%.60s\" is "
						 "unknown; expected calendar "
						 "or first_use",
						 what, text);
	}
	if (tz) {
		snprintf(field, sizeof(field), "%s.tz", what);
		if (sluice_yaml_string(y, tz, field, &text) < 0)
			return -1;
		if (al == SLUICE_ALIGN_FIRST_USE)
			return sluice_yaml_error(
				y, tz,
				"%s: tz with align: first_use; "
				"expected no tz (a first-use "
				"window lasts one %s from the "
				"key's first request, in any "
				"zone)",
				what, sluice_per_name(unit));
		if (sluice_zone_load(text, &zone, msg, sizeof(msg)) < 0)
			return sluice_yaml_error(
				y, tz,
				"%s.tz \"%.60s\": %s; expected "
				"an IANA zone such as "
				"Europe/Berlin, or UTC",
				what, text, msg);
	}
	if (sluice_quota_init(limit, quota, unit, al, zone, msg, sizeof(msg)) <
	    0)
		return sluice_yaml_error(y, q, "%s: %s", what, msg);
	return 0;
}

static int parse_limit(sluice_yaml_t *y, yaml_node_t *node,
		       sluice_limit_t *limit, const char *what)
{
	static const char *const keys[] = {"capacity", "rate", "quota", "per",
					   "align",    "tz",   NULL};
	yaml_node_t *cap, *rate, *v;
	uint64_t capacity;
	sluice_rate_t r;
	const char *text;
	char msg[384], field[320];

	if (sluice_yaml_expect_map(y, node, what) < 0 ||
	    sluice_yaml_check_keys(y, node, what, keys) < 0)
		return -1;
	if (sluice_yaml_get(y, node, "quota"))
		return parse_quota(y, node, limit, what);
	if ((v = sluice_yaml_get_key(y, node, "per")) ||
	    (v = sluice_yaml_get_key(y, node, "align")) ||
	    (v = sluice_yaml_get_key(y, node, "tz")))
		return sluice_yaml_error(y, v,
					 "%s: %s without quota; expected "
					 "{quota: 10000, per: month}, or a "
					 "token bucket {capacity: 100, rate: "
					 "2/s} without it",
					 what,
					 (const char *)v->data.scalar.value);
	cap = sluice_yaml_get(y, node, "capacity");
	rate = sluice_yaml_get(y, node, "rate");
	if (!cap || !rate)
		return sluice_yaml_error(y, node,
					 "%s has no %s; expected {capacity: "
					 "100, rate: 2/s}",
					 what, cap ? "rate" : "capacity");
	snprintf(field, sizeof(field), "%s.capacity", what);
	if (sluice_yaml_uint(y, cap, field, 1, SLUICE_UNITS_MAX, &capacity) < 0)
		return -1;
	snprintf(field, sizeof(field), "%s.rate", what);
	if (sluice_yaml_string(y, rate, field, &text) < 0)
		return -1;
	if (sluice_rate_parse(text, &r, msg, sizeof(msg)) < 0) {
		semicolon(msg);
		return sluice_yaml_error(y, rate, "%s: %s", what, msg);
	}
	if (sluice_limit_init(limit, capacity, &r, msg, sizeof(msg)) < 0)
		return sluice_yaml_error(y, cap,
					 "%s: %s; expected a smaller capacity "
					 "or a faster rate",
					 what, msg);
	return 0;
}

int sluice_config_parse_limits(sluice_yaml_t *y, yaml_node_t *node,
			       sluice_limit_set_t *set, const char *what)
{
	char item[256];
	size_t i, n;

	if (sluice_yaml_expect_seq(y, node, what) < 0)
		return -1;
	n = sluice_yaml_seq_len(node);
	if (n == 0 || n > SLUICE_MAX_LIMITS)
		return sluice_yaml_error(y, node,
					 "%s has %zu entries; expected 1 to %d "
					 "entries like {capacity: 100, rate: "
					 "2/s}",
					 what, n, SLUICE_MAX_LIMITS);
	for (i = 0; i < n; i++) {
		snprintf(item, sizeof(item), "%s[%zu]", what, i);
		if (parse_limit(y, sluice_yaml_seq_at(y, node, i),
				&set->limits[i], item) < 0)
			return -1;
		set->nlimits = i + 1;
	}
	return 0;
}
