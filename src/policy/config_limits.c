/*
 * config_limits.c -- a list of limits, [{capacity: 100, rate: 2/s}, ...],
 * as a rule, a tier and an override give them.
 */
#include "policy/config_internal.h"

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

static int parse_limit(sluice_yaml_t *y, yaml_node_t *node,
		       sluice_limit_t *limit, const char *what)
{
	static const char *const keys[] = {"capacity", "rate", NULL};
	yaml_node_t *cap, *rate;
	uint64_t capacity;
	sluice_rate_t r;
	const char *text;
	char msg[384], field[320];

	if (sluice_yaml_expect_map(y, node, what) < 0 ||
	    sluice_yaml_check_keys(y, node, what, keys) < 0)
		return -1;
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
