/*
 * file.c -- one envoyproxy/ratelimit YAML file: its domain and its
 * tree of descriptors, each `rate_limit:` made the token buckets the
 * verdict engine charges (config.c loads the directory).
 *
 * The checks are envoyproxy/ratelimit's (empty or duplicate domain, empty
 * key, duplicate key/value at one level, unknown field, bad unit, a unit
 * on an unlimited limit, an empty `replaces` or one naming its own limit,
 * share_threshold without a wildcard), made per level rather than against
 * one list of every field name, so a field in the wrong place is caught
 * too.  Errors name their file and line (sluice_yaml_error).
 */
#include "policy/envoy/config.h"
#include "policy/envoy/internal.h"
#include "policy/envoy/meta.h"
#include "policy/envoy/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What the parser of one file carries. */
typedef struct load_s {
	sluice_yaml_t *y;
	sluice_envoy_config_t *cfg;
	const char *file; /* cfg's copy of the path */
	const char *domain;
} load_t;

char *sluice_envoy_join(const char *a, const char *sep, const char *b,
			const char *sep2, const char *c)
{
	size_t n = strlen(a) + strlen(sep) + strlen(b) + strlen(sep2) +
		   (c ? strlen(c) : 0) + 1;
	char *s = malloc(n);

	if (s)
		snprintf(s, n, "%s%s%s%s%s", a, sep, b, c ? sep2 : "",
			 c ? c : "");
	return s;
}

static int parse_unit(load_t *L, yaml_node_t *v, const char *what,
		      sluice_rls_unit_t *out)
{
	const char *s;

	if (sluice_yaml_string(L->y, v, what, &s) < 0)
		return -1;
	*out = sluice_envoy_unit_parse(s);
	if (*out == SLUICE_RLS_UNIT_UNKNOWN)
		return sluice_yaml_error(L->y, v,
					 "invalid rate limit unit '%.60s'; "
					 "expected second, minute, hour, day, "
					 "week, month or year",
					 s);
	return 0;
}

/* unit + requests_per_unit (+ burst) at `map` into limit `i` of l. */
static int parse_one_limit(load_t *L, yaml_node_t *map, sluice_envoy_limit_t *l,
			   size_t i, const char *what)
{
	yaml_node_t *vu = sluice_yaml_get(L->y, map, "unit");
	yaml_node_t *vr = sluice_yaml_get(L->y, map, "requests_per_unit");
	yaml_node_t *vb = sluice_yaml_get(L->y, map, "burst");
	uint64_t rpu = 0, burst = 0;
	char msg[200];
	int rc = 0;

	if (!vu)
		return sluice_yaml_error(L->y, map,
					 "invalid rate limit unit ''; %s needs "
					 "a unit (second, minute, hour, day, "
					 "week, month or year)",
					 what);
	if (parse_unit(L, vu, "unit", &l->units[i].unit) < 0)
		rc = -1;
	/* As envoyproxy/ratelimit: an absent requests_per_unit is 0. */
	if (vr && sluice_yaml_uint(L->y, vr, "requests_per_unit", 0, UINT32_MAX,
				   &rpu) < 0)
		rc = -1;
	if (vb && sluice_yaml_uint(L->y, vb, "burst", 1, SLUICE_UNITS_MAX,
				   &burst) < 0)
		rc = -1;
	if (rc < 0)
		return -1;
	l->units[i].requests_per_unit = (uint32_t)rpu;
	if (rpu == 0) {
		if (vb)
			return sluice_yaml_error(L->y, vb,
						 "burst with requests_per_unit "
						 "0; expected no burst (0 "
						 "refuses every request)");
		l->blocked = 1;
		/* Never charged: any valid limit keeps the set well
		 * formed. */
		return sluice_envoy_limit_make(1, SLUICE_RLS_UNIT_SECOND, 1,
					       &l->set.limits[i], msg,
					       sizeof(msg));
	}
	if (sluice_envoy_calendar(&L->cfg->settings, L->domain)) {
		if (vb)
			return sluice_yaml_error(L->y, vb,
						 "burst with envoy.windows: "
						 "calendar; expected no burst "
						 "(a calendar window counts "
						 "requests_per_unit)");
		if (sluice_envoy_quota_make((uint32_t)rpu, l->units[i].unit,
					    &l->set.limits[i], msg,
					    sizeof(msg)) < 0)
			return sluice_yaml_error(L->y, map, "%s: %s", what,
						 msg);
		return 0;
	}
	if (sluice_envoy_limit_make((uint32_t)rpu, l->units[i].unit, burst,
				    &l->set.limits[i], msg, sizeof(msg)) < 0)
		return sluice_yaml_error(L->y, map,
					 "%s: %s; expected a smaller burst or "
					 "a shorter unit",
					 what, msg);
	return 0;
}

static int parse_replaces(load_t *L, yaml_node_t *v, sluice_envoy_limit_t *l)
{
	static const char *const keys[] = {"name", NULL};
	size_t i, n;
	int rc = 0;

	if (sluice_yaml_expect_seq(L->y, v, "replaces") < 0)
		return -1;
	n = sluice_yaml_seq_len(v);
	if (!(l->replaces = calloc(n ? n : 1, sizeof(char *))))
		return sluice_yaml_nomem(L->y, v);
	for (i = 0; i < n; i++) {
		yaml_node_t *it = sluice_yaml_seq_at(L->y, v, i);
		yaml_node_t *nm;
		const char *s = "";

		if (sluice_yaml_expect_map(L->y, it, "replaces entry") < 0 ||
		    sluice_yaml_check_keys(L->y, it, "replaces entry", keys) <
			    0) {
			rc = -1;
			continue;
		}
		nm = sluice_yaml_get(L->y, it, "name");
		if (nm && !sluice_yaml_is_null(nm) &&
		    sluice_yaml_string(L->y, nm, "replaces name", &s) < 0) {
			rc = -1;
			continue;
		}
		if (!*s) {
			rc = sluice_yaml_error(L->y, it,
					       "should not have an empty "
					       "replaces entry; expected "
					       "{name: <a rate_limit's name>}");
			continue;
		}
		if (l->name && strcmp(s, l->name) == 0) {
			rc = sluice_yaml_error(
				L->y, nm,
				"replaces should not contain "
				"name of same descriptor ('%.60s')",
				s);
			continue;
		}
		if (!(l->replaces[l->nreplaces++] = strdup(s)))
			return sluice_yaml_nomem(L->y, it);
	}
	return rc;
}

/* An unlimited rate_limit names no unit and no limits. */
static int check_unlimited(load_t *L, yaml_node_t *v, yaml_node_t *lims)
{
	yaml_node_t *x;

	if ((x = sluice_yaml_get(L->y, v, "unit")) && !sluice_yaml_is_null(x) &&
	    sluice_envoy_unit_parse((const char *)x->data.scalar.value) !=
		    SLUICE_RLS_UNIT_UNKNOWN)
		return sluice_yaml_error(L->y, x,
					 "should not specify rate "
					 "limit unit when unlimited");
	if (lims)
		return sluice_yaml_error(L->y, lims,
					 "limits with unlimited; "
					 "expected one or the other");
	return 0;
}

/* sluice's extension: limits: [{unit, requests_per_unit, burst}, ...],
 * several limits, all of which must pass; none of those keys beside it. */
static int parse_limit_list(load_t *L, yaml_node_t *v, yaml_node_t *lims,
			    sluice_envoy_limit_t *l)
{
	static const char *const lim_keys[] = {"unit", "requests_per_unit",
					       "burst", NULL};
	yaml_node_t *x;
	size_t i, n;
	int rc = 0;

	for (i = 0; i < 3; i++) {
		if ((x = sluice_yaml_get_key(L->y, v, lim_keys[i])))
			return sluice_yaml_error(L->y, x,
						 "%s beside limits; expected "
						 "it in each item of limits",
						 lim_keys[i]);
	}
	if (sluice_yaml_expect_seq(L->y, lims, "limits") < 0)
		return -1;
	n = sluice_yaml_seq_len(lims);
	if (n < 1 || n > SLUICE_MAX_LIMITS)
		return sluice_yaml_error(L->y, lims,
					 "limits has %zu items; expected 1 to "
					 "%d",
					 n, SLUICE_MAX_LIMITS);
	for (i = 0; i < n; i++) {
		yaml_node_t *it = sluice_yaml_seq_at(L->y, lims, i);

		if (sluice_yaml_expect_map(L->y, it, "limits item") < 0 ||
		    sluice_yaml_check_keys(L->y, it, "limits item", lim_keys) <
			    0 ||
		    parse_one_limit(L, it, l, i, "limits item") < 0)
			rc = -1;
	}
	l->set.nlimits = n;
	if (l->blocked && n > 1)
		rc = sluice_yaml_error(L->y, lims,
				       "a limit with requests_per_unit 0 "
				       "among others; expected it alone");
	return rc;
}

static int parse_rate_limit(load_t *L, yaml_node_t *v, sluice_envoy_node_t *d,
			    int shadow)
{
	static const char *const keys[] = {"unit",	"requests_per_unit",
					   "unlimited", "name",
					   "replaces",	"burst",
					   "limits",	NULL};
	sluice_envoy_limit_t *l;
	yaml_node_t *x, *lims;
	const char *s;
	int rc = 0;

	if (sluice_yaml_expect_map(L->y, v, "rate_limit") < 0)
		return -1;
	if (sluice_yaml_check_keys(L->y, v, "rate_limit", keys) < 0)
		rc = -1;
	if (!(l = d->limit = calloc(1, sizeof(*l))))
		return sluice_yaml_nomem(L->y, v);
	if ((x = sluice_yaml_get(L->y, v, "name"))) {
		if (sluice_yaml_string(L->y, x, "rate_limit.name", &s) < 0)
			rc = -1;
		else if (*s && !(l->name = strdup(s)))
			return sluice_yaml_nomem(L->y, x);
	}
	if ((x = sluice_yaml_get(L->y, v, "replaces")) &&
	    parse_replaces(L, x, l) < 0)
		rc = -1;
	if ((x = sluice_yaml_get(L->y, v, "unlimited")) &&
	    sluice_yaml_bool(L->y, x, "unlimited", &l->unlimited) < 0)
		rc = -1;
	lims = sluice_yaml_get(L->y, v, "limits");
	l->rule.name = sluice_envoy_join(L->domain, ".", d->stat_key, "", NULL);
	if (!l->rule.name)
		return sluice_yaml_nomem(L->y, v);
	l->rule.shadow = shadow;
	l->rule.on_store_error = L->cfg->settings.on_store_error;
	l->rule.cost = 1;
	l->rule.line = sluice_yaml_line(v);
	if (l->unlimited)
		return check_unlimited(L, v, lims) < 0 ? -1 : rc;
	if (!lims) {
		l->set.nlimits = 1;
		return parse_one_limit(L, v, l, 0, "rate_limit") < 0 ? -1 : rc;
	}
	return parse_limit_list(L, v, lims, l) < 0 ? -1 : rc;
}

static int parse_list(load_t *L, yaml_node_t *seq, const char *parent,
		      sluice_envoy_node_t **out, size_t *nout, int depth);

/* Splits a wildcard value at each '*'. */
static int split_wildcard(sluice_envoy_node_t *d)
{
	const char *p = d->value, *star;
	size_t n = 1, i = 0;

	for (star = p; (star = strchr(star, '*')); star++)
		n++;
	if (!(d->parts = calloc(n, sizeof(char *))))
		return -1;
	d->nparts = n;
	for (;;) {
		star = strchr(p, '*');
		if (!(d->parts[i++] = strndup(p, star ? (size_t)(star - p)
						      : strlen(p))))
			return -1;
		if (!star)
			return 0;
		p = star + 1;
	}
}

static int parse_node(load_t *L, yaml_node_t *it, const char *parent,
		      sluice_envoy_node_t *d, int depth)
{
	static const char *const keys[] = {"key",
					   "value",
					   "rate_limit",
					   "descriptors",
					   "shadow_mode",
					   "detailed_metric",
					   "value_to_metric",
					   "share_threshold",
					   "metadata",
					   "quota_mode",
					   NULL};
	static const char *const flags[] = {"shadow_mode", "detailed_metric",
					    "value_to_metric",
					    "share_threshold", "quota_mode"};
	int *fp[5] = {&d->shadow_mode, &d->detailed_metric, &d->value_to_metric,
		      &d->share_threshold, &d->quota_mode};
	yaml_node_t *x;
	const char *s;
	int rc = 0, i;

	d->file = L->file;
	d->line = sluice_yaml_line(it);
	if (sluice_yaml_expect_map(L->y, it, "descriptor") < 0)
		return -1;
	if (sluice_yaml_check_keys(L->y, it, "descriptor", keys) < 0)
		rc = -1;
	x = sluice_yaml_get(L->y, it, "key");
	if (!x || (sluice_yaml_string(L->y, x, "key", &s) == 0 && !*s))
		return sluice_yaml_error(L->y, x ? x : it,
					 "descriptor has empty key; expected "
					 "key: <name>");
	if (sluice_yaml_string(L->y, x, "key", &s) < 0)
		return -1;
	if (!(d->key = strdup(s)))
		return sluice_yaml_nomem(L->y, x);
	if ((x = sluice_yaml_get(L->y, it, "value"))) {
		if (sluice_yaml_is_null(x))
			s = "";
		else if (sluice_yaml_string(L->y, x, "value", &s) < 0)
			return -1;
		/* As envoyproxy/ratelimit: an empty value is no value. */
		if (*s && !(d->value = strdup(s)))
			return sluice_yaml_nomem(L->y, x);
		if (d->value && strchr(d->value, '*') && split_wildcard(d) < 0)
			return sluice_yaml_nomem(L->y, x);
	}
	d->stat_key = sluice_envoy_join(parent, *parent ? "." : "", d->key, "_",
					d->value);
	if (!d->stat_key)
		return sluice_yaml_nomem(L->y, it);
	for (i = 0; i < 5; i++)
		if ((x = sluice_yaml_get(L->y, it, flags[i])) &&
		    sluice_yaml_bool(L->y, x, flags[i], fp[i]) < 0)
			rc = -1;
	if (d->share_threshold && !d->nparts)
		rc = sluice_yaml_error(L->y, it,
				       "share_threshold can only be used with "
				       "wildcard values (containing '*'), but "
				       "found key '%.100s'",
				       d->stat_key);
	if ((x = sluice_yaml_get(L->y, it, "metadata")) &&
	    sluice_meta_from_yaml(L->y, x, &d->metadata) < 0)
		rc = -1;
	if ((x = sluice_yaml_get(L->y, it, "rate_limit")) &&
	    parse_rate_limit(L, x, d, d->shadow_mode) < 0)
		rc = -1;
	/* A series only where a limit is counted: a level without one
	 * never has hits of its own. */
	if (d->limit)
		d->series = sluice_envoy_series(L->domain, d->stat_key);
	if ((x = sluice_yaml_get(L->y, it, "descriptors")) &&
	    !sluice_yaml_is_null(x) &&
	    parse_list(L, x, d->stat_key, &d->children, &d->nchildren,
		       depth + 1) < 0)
		rc = -1;
	return rc;
}

int sluice_envoy_same_str(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

static int parse_list(load_t *L, yaml_node_t *seq, const char *parent,
		      sluice_envoy_node_t **out, size_t *nout, int depth)
{
	size_t i, j, n;
	int rc = 0;

	if (depth > SLUICE_ENVOY_MAX_DEPTH)
		return sluice_yaml_error(L->y, seq,
					 "descriptors nested %d deep; expected "
					 "at most %d levels",
					 depth, SLUICE_ENVOY_MAX_DEPTH);
	if (sluice_yaml_expect_seq(L->y, seq, "descriptors") < 0)
		return -1;
	n = sluice_yaml_seq_len(seq);
	if (!(*out = calloc(n ? n : 1, sizeof(**out))))
		return sluice_yaml_nomem(L->y, seq);
	for (i = 0; i < n; i++) {
		yaml_node_t *it = sluice_yaml_seq_at(L->y, seq, i);
		sluice_envoy_node_t *d = &(*out)[*nout];

		(*nout)++;
		if (parse_node(L, it, parent, d, depth) < 0) {
			rc = -1;
			continue;
		}
		for (j = 0; j + 1 < *nout; j++)
			if (sluice_envoy_same_str((*out)[j].key, d->key) &&
			    sluice_envoy_same_str((*out)[j].value, d->value)) {
				rc = sluice_yaml_error(
					L->y, it,
					"duplicate descriptor composite key "
					"'%.60s.%.200s' (first at line %d); "
					"expected each key/value once per "
					"level",
					L->domain, d->stat_key, (*out)[j].line);
				break;
			}
	}
	return rc;
}

int sluice_envoy_parse_file(sluice_yaml_t *y, sluice_envoy_config_t *cfg,
			    const char *file, yaml_node_t *root,
			    sluice_envoy_domain_t *dom)
{
	load_t load = {.y = y, .cfg = cfg, .file = file}, *L = &load;
	static const char *const keys[] = {"domain", "descriptors", NULL};
	yaml_node_t *x;
	const char *s;
	int rc = 0;

	dom->file = L->file;
	dom->line = sluice_yaml_line(root);
	if (sluice_yaml_check_keys(L->y, root, "top level", keys) < 0)
		rc = -1;
	x = sluice_yaml_get(L->y, root, "domain");
	if (!x || sluice_yaml_is_null(x) ||
	    (sluice_yaml_string(L->y, x, "domain", &s) == 0 && !*s))
		return sluice_yaml_error(L->y, x ? x : root,
					 "config file cannot have empty "
					 "domain; expected domain: <name>");
	if (sluice_yaml_string(L->y, x, "domain", &s) < 0)
		return -1;
	if (!(dom->name = strdup(s)))
		return sluice_yaml_nomem(L->y, x);
	dom->line = sluice_yaml_line(x);
	L->domain = dom->name;
	if ((x = sluice_yaml_get(L->y, root, "descriptors")) &&
	    !sluice_yaml_is_null(x) &&
	    parse_list(L, x, "", &dom->children, &dom->nchildren, 1) < 0)
		rc = -1;
	return rc;
}
