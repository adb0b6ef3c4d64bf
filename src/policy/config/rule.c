/*
 * rule.c -- reading the `rules:` list of the config file.
 *
 * Each rule says which requests it applies to (match), whose bucket they
 * go to (key), which limits apply (limits, or tiers chosen by a header),
 * what a request costs, and what to do when the store fails.  Every
 * field is checked here, so the HTTP layer can trust a loaded config
 * completely.  docs/CONFIG.md documents each field; keep it in step.
 */
#include "policy/config/internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RULES_MAX    1024
#define PATH_MAX_LEN 1024

/* Rule and tier names end up in store keys and in quoted header fields
 * (RateLimit-Policy: "name";q=100), so they stay plain. */
static int valid_name(const char *s)
{
	size_t n = strlen(s), i;

	if (n == 0 || n > SLUICE_NAME_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("_.-", s[i]))
			return 0;
	return 1;
}

/* An HTTP token (RFC 9110 tchar), e.g. a header name or a method. */
static int valid_token(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n > 64)
		return 0;
	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) &&
		    !strchr("!#$%&'*+-.^_`|~", s[i]))
			return 0;
	return 1;
}

static char *dup_lower(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	size_t i;

	if (!d)
		return NULL;
	for (i = 0; i < n; i++)
		d[i] = (char)tolower((unsigned char)s[i]);
	d[n] = '\0';
	return d;
}

/* A field that may be one string or a list of strings: calls fn on each. */
typedef int (*item_fn)(sluice_yaml_t *y, yaml_node_t *item, void *arg,
		       const char *what);

static int each_string(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		       item_fn fn, void *arg)
{
	size_t i, n;

	if (node->type == YAML_SCALAR_NODE && !sluice_yaml_is_null(node))
		return fn(y, node, arg, what);
	if (node->type != YAML_SEQUENCE_NODE)
		return sluice_yaml_error(y, node,
					 "%s is %s; expected a string or a "
					 "list of strings",
					 what, sluice_yaml_kind(node));
	n = sluice_yaml_seq_len(node);
	if (n == 0)
		return sluice_yaml_error(y, node,
					 "%s is an empty list; expected at "
					 "least one entry (or leave it out)",
					 what);
	for (i = 0; i < n; i++)
		if (fn(y, sluice_yaml_seq_at(y, node, i), arg, what) < 0)
			return -1;
	return 0;
}

/* --------------------------------------------------------------- match */

static int add_method(sluice_yaml_t *y, yaml_node_t *item, void *arg,
		      const char *what)
{
	sluice_rule_t *r = arg;
	const char *s;
	char **m;
	size_t i, n;

	if (sluice_yaml_string(y, item, what, &s) < 0)
		return -1;
	n = strlen(s);
	for (i = 0; i < n; i++)
		if (!isalpha((unsigned char)s[i]))
			break;
	if (n == 0 || n > 32 || i < n)
		return sluice_yaml_error(y, item,
					 "%s: \"%.60s\" is not an HTTP method; "
					 "expected e.g. GET, POST, PUT, DELETE",
					 what, s);
	m = realloc(r->methods, (r->nmethods + 1) * sizeof(*m));
	if (!m)
		return sluice_yaml_nomem(y, item);
	r->methods = m;
	m[r->nmethods] = malloc(n + 1);
	if (!m[r->nmethods])
		return sluice_yaml_nomem(y, item);
	for (i = 0; i <= n; i++)
		m[r->nmethods][i] = (char)toupper((unsigned char)s[i]);
	r->nmethods++;
	return 0;
}

static int parse_match(sluice_yaml_t *y, yaml_node_t *node, sluice_rule_t *r,
		       const char *rule)
{
	static const char *const keys[] = {"methods", "path", "case_sensitive",
					   "strict_slash", NULL};
	char what[256];
	yaml_node_t *v;
	const char *s;
	size_t n, m;

	if (sluice_yaml_is_null(node))
		return 0; /* "match:" with nothing: every request */
	snprintf(what, sizeof(what), "%s: match", rule);
	if (sluice_yaml_expect_map(y, node, what) < 0 ||
	    sluice_yaml_check_keys(y, node, what, keys) < 0)
		return -1;
	if ((v = sluice_yaml_get(y, node, "methods"))) {
		snprintf(what, sizeof(what), "%s: match.methods", rule);
		if (each_string(y, v, what, add_method, r) < 0)
			return -1;
	}
	if ((v = sluice_yaml_get(y, node, "case_sensitive"))) {
		snprintf(what, sizeof(what), "%s: match.case_sensitive", rule);
		if (sluice_yaml_bool(y, v, what, &r->path_case_sensitive) < 0)
			return -1;
	}
	if ((v = sluice_yaml_get(y, node, "strict_slash"))) {
		snprintf(what, sizeof(what), "%s: match.strict_slash", rule);
		if (sluice_yaml_bool(y, v, what, &r->path_strict_slash) < 0)
			return -1;
	}
	if (!(v = sluice_yaml_get(y, node, "path"))) {
		if (sluice_yaml_get(y, node, "case_sensitive") ||
		    sluice_yaml_get(y, node, "strict_slash"))
			return sluice_yaml_error(y, node,
						 "%s: match has case_sensitive "
						 "or strict_slash but no path; "
						 "expected a path such as "
						 "\"/api/upload\" with them",
						 rule);
		return 0;
	}
	snprintf(what, sizeof(what), "%s: match.path", rule);
	if (sluice_yaml_string(y, v, what, &s) < 0)
		return -1;
	n = strlen(s);
	if ((s[0] != '/' && s[0] != '*') || n > PATH_MAX_LEN)
		return sluice_yaml_error(y, v,
					 "%s \"%.60s\" is not a path glob; "
					 "expected a path such as "
					 "\"/api/upload\" or \"/api/*\" (at "
					 "most %d characters)",
					 what, s, PATH_MAX_LEN);
	r->path = strdup(s);
	if (!r->path)
		return sluice_yaml_nomem(y, v);
	/* Requests are matched after normalisation, so a pattern that
	 * normalisation changes ("/api//upload", "/api/%75pload") would
	 * silently never match. */
	m = sluice_path_normalize(s, n, r->path);
	if (m != n || memcmp(s, r->path, n) != 0) {
		r->path[m] = '\0';
		return sluice_yaml_error(y, v,
					 "%s \"%.60s\" never matches: request "
					 "paths are matched after decoding "
					 "escapes, dropping ;parameters, "
					 "merging slashes and resolving dot "
					 "segments; expected "
					 "\"%.60s\"",
					 what, s, r->path);
	}
	/* "/api/upload/" also matches "/api/upload" unless strict_slash: a
	 * request's one trailing slash is optional at match time, so the
	 * pattern's is dropped here. */
	if (!r->path_strict_slash && n > 1 && r->path[n - 1] == '/')
		r->path[n - 1] = '\0';
	return 0;
}

/* ----------------------------------------------------------------- key */

/* "ip", "header:x-user-id", or parts joined by '+' ("header:x-api-key+ip") */
static int add_source(sluice_yaml_t *y, yaml_node_t *item, void *arg,
		      const char *what)
{
	sluice_rule_t *r = arg;
	sluice_key_source_t *src;
	const char *s, *p, *end;

	if (sluice_yaml_string(y, item, what, &s) < 0)
		return -1;
	if (r->nsources == SLUICE_MAX_SOURCES)
		return sluice_yaml_error(
			y, item,
			"%s has more than %d sources; expected "
			"at most %d",
			what, SLUICE_MAX_SOURCES, SLUICE_MAX_SOURCES);
	src = &r->sources[r->nsources++];
	for (p = s;; p = end + 1) {
		sluice_key_part_t *part;
		size_t n;

		end = strchr(p, '+');
		if (!end)
			end = p + strlen(p);
		n = (size_t)(end - p);
		if (src->nparts == SLUICE_MAX_PARTS)
			return sluice_yaml_error(
				y, item,
				"%s: \"%.80s\" joins more than "
				"%d parts; expected at most %d",
				what, s, SLUICE_MAX_PARTS, SLUICE_MAX_PARTS);
		part = &src->parts[src->nparts];
		if (n == 2 && strncmp(p, "ip", 2) == 0) {
			part->kind = SLUICE_KEY_IP;
		} else if (n > 7 && strncmp(p, "header:", 7) == 0 &&
			   valid_token(p + 7, n - 7)) {
			part->kind = SLUICE_KEY_HEADER;
			part->header = dup_lower(p + 7, n - 7);
			if (!part->header)
				return sluice_yaml_nomem(y, item);
		} else {
			return sluice_yaml_error(
				y, item,
				"%s: \"%.80s\" is not a key source; expected "
				"\"ip\", \"header:NAME\" or parts joined by "
				"'+' such as \"header:x-api-key+ip\"",
				what, s);
		}
		src->nparts++;
		if (!*end)
			break;
	}
	return 0;
}

/* --------------------------------------------------------------- tiers */

/* tiers.header: the request header that names the tier. */
static int parse_tier_header(sluice_yaml_t *y, yaml_node_t *hdr,
			     sluice_rule_t *r, const char *rule)
{
	const char *s;
	char what[256];

	snprintf(what, sizeof(what), "%s: tiers.header", rule);
	if (sluice_yaml_string(y, hdr, what, &s) < 0)
		return -1;
	if (!valid_token(s, strlen(s)))
		return sluice_yaml_error(y, hdr,
					 "%s \"%.60s\" is not a header name; "
					 "expected e.g. x-user-tier",
					 what, s);
	r->tier_header = dup_lower(s, strlen(s));
	if (!r->tier_header)
		return sluice_yaml_nomem(y, hdr);
	return 0;
}

/* tiers.limits: {name: [limits], ...}, each tier once; the one named
 * dname becomes the default. */
static int parse_tier_limits(sluice_yaml_t *y, yaml_node_t *lim,
			     sluice_rule_t *r, const char *rule,
			     const char *dname)
{
	yaml_node_pair_t *p;
	const char *s;
	char what[256];
	size_t i, n;

	snprintf(what, sizeof(what), "%s: tiers.limits", rule);
	if (sluice_yaml_expect_map(y, lim, what) < 0)
		return -1;
	n = (size_t)(lim->data.mapping.pairs.top -
		     lim->data.mapping.pairs.start);
	if (n == 0 || n > 64)
		return sluice_yaml_error(y, lim,
					 "%s has %zu tiers; expected 1 to 64 "
					 "tiers, each a list of limits",
					 what, n);
	r->tiers = calloc(n, sizeof(*r->tiers));
	if (!r->tiers)
		return sluice_yaml_nomem(y, lim);
	for (i = 0, p = lim->data.mapping.pairs.start; i < n; i++, p++) {
		yaml_node_t *k = sluice_yaml_node(y, p->key);
		size_t j;

		if (sluice_yaml_string(y, k, "tier name", &s) < 0)
			return -1;
		if (!valid_name(s))
			return sluice_yaml_error(y, k,
						 "tier name \"%.60s\" is not "
						 "valid; expected 1 to %d "
						 "letters, digits, '_', '.' or "
						 "'-'",
						 s, SLUICE_NAME_MAX);
		for (j = 0; j < i; j++)
			if (strcmp(r->tiers[j].name, s) == 0)
				return sluice_yaml_error(
					y, k,
					"%s: tier \"%s\" appears twice; "
					"expected each tier once",
					what, s);
		r->tiers[i].name = strdup(s);
		r->ntiers = i + 1;
		if (!r->tiers[i].name)
			return sluice_yaml_nomem(y, k);
		snprintf(what, sizeof(what), "%s: tiers.limits.%s", rule, s);
		if (sluice_config_parse_limits(y, sluice_yaml_node(y, p->value),
					       &r->tiers[i], what) < 0)
			return -1;
		if (strcmp(s, dname) == 0)
			r->default_tier = i;
	}
	return 0;
}

/* tiers.default names one of the tiers read (the message lists them). */
static int check_default_tier(sluice_yaml_t *y, yaml_node_t *def,
			      const sluice_rule_t *r, const char *rule,
			      const char *dname)
{
	char list[256];
	size_t i, off = 0;

	for (i = 0; i < r->ntiers; i++)
		if (strcmp(r->tiers[i].name, dname) == 0)
			return 0;
	list[0] = '\0';
	for (i = 0; i < r->ntiers && off < sizeof(list); i++)
		off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s",
					i ? ", " : "", r->tiers[i].name);
	return sluice_yaml_error(y, def,
				 "%s: tiers.default \"%.60s\" is not a "
				 "tier; expected one of: %s",
				 rule, dname, list);
}

static int parse_tiers(sluice_yaml_t *y, yaml_node_t *node, sluice_rule_t *r,
		       const char *rule)
{
	static const char *const keys[] = {"header", "default", "limits", NULL};
	yaml_node_t *hdr, *def, *lim;
	const char *dname = NULL;
	char what[256];

	snprintf(what, sizeof(what), "%s: tiers", rule);
	if (sluice_yaml_expect_map(y, node, what) < 0 ||
	    sluice_yaml_check_keys(y, node, what, keys) < 0)
		return -1;
	hdr = sluice_yaml_get(y, node, "header");
	def = sluice_yaml_get(y, node, "default");
	lim = sluice_yaml_get(y, node, "limits");
	if (!hdr || !def || !lim)
		return sluice_yaml_error(
			y, node,
			"%s has no %s; expected header, default and limits, "
			"e.g. {header: x-user-tier, default: anonymous, "
			"limits: {anonymous: [{capacity: 50, rate: 50/min}]}}",
			what,
			!hdr   ? "header"
			: !def ? "default"
			       : "limits");
	if (parse_tier_header(y, hdr, r, rule) < 0)
		return -1;
	snprintf(what, sizeof(what), "%s: tiers.default", rule);
	if (sluice_yaml_string(y, def, what, &dname) < 0 ||
	    parse_tier_limits(y, lim, r, rule, dname) < 0)
		return -1;
	return check_default_tier(y, def, r, rule, dname);
}

/* ---------------------------------------------------------------- rule */

static int check_cost(sluice_yaml_t *y, yaml_node_t *node,
		      const sluice_rule_t *r, const char *rule)
{
	const sluice_limit_set_t *sets = r->ntiers ? r->tiers : &r->limits;
	size_t nsets = r->ntiers ? r->ntiers : 1, i, j;

	for (i = 0; i < nsets; i++)
		for (j = 0; j < sets[i].nlimits; j++)
			if (r->cost > sets[i].limits[j].capacity)
				return sluice_yaml_error(
					y, node,
					"%s: cost %llu exceeds the capacity "
					"%llu of %s%s[%zu], so no request "
					"could ever pass; expected a cost of "
					"at most every capacity",
					rule, (unsigned long long)r->cost,
					(unsigned long long)sets[i]
						.limits[j]
						.capacity,
					r->ntiers ? "tiers.limits." : "limits",
					r->ntiers ? sets[i].name : "", j);
	/* An override's limits must let the rule's cost through too. */
	for (i = 0; r->overrides && i < r->overrides->n; i++) {
		const sluice_override_t *e = &r->overrides->entries[i];
		const sluice_limit_set_t *set = &r->overrides->sets[e->set];

		for (j = 0; j < set->nlimits; j++)
			if (r->cost > set->limits[j].capacity)
				return sluice_yaml_error(
					y, node,
					"%s: cost %llu exceeds the capacity "
					"%llu of override \"%.60s\", so no "
					"request of that key could ever pass; "
					"expected a cost of at most every "
					"capacity",
					rule, (unsigned long long)r->cost,
					(unsigned long long)set->limits[j]
						.capacity,
					e->key);
	}
	return 0;
}

/* A rule's name, kept in r and in rule (its name in messages from here
 * on): 0, -1 when it is missing or wrong (reported), or SLUICE_ENOMEM
 * (reported) when reading must stop. */
static int parse_rule_name(sluice_yaml_t *y, yaml_node_t *node,
			   sluice_rule_t *r, char *rule, size_t rulelen)
{
	yaml_node_t *v;
	const char *s;
	char what[256];

	snprintf(what, sizeof(what), "%s.name", rule);
	if (!(v = sluice_yaml_get(y, node, "name")))
		return sluice_yaml_error(y, node,
					 "%s has no name; expected name: "
					 "followed by a unique name",
					 rule);
	if (sluice_yaml_string(y, v, what, &s) < 0)
		return -1;
	if (!valid_name(s))
		return sluice_yaml_error(y, v,
					 "%s \"%.60s\" is not valid; expected "
					 "1 to %d letters, digits, '_', '.' "
					 "or '-'",
					 what, s, SLUICE_NAME_MAX);
	r->name = strdup(s);
	r->limits.name = strdup(s);
	if (!r->name || !r->limits.name) {
		sluice_yaml_nomem(y, v);
		return SLUICE_ENOMEM;
	}
	snprintf(rule, rulelen, "rule \"%s\"", s);
	return 0;
}

/* key: its sources, or the client IP when the rule names none. */
static int parse_rule_key(sluice_yaml_t *y, yaml_node_t *node, sluice_rule_t *r,
			  const char *rule)
{
	yaml_node_t *v;
	char what[256];

	snprintf(what, sizeof(what), "%s: key", rule);
	if ((v = sluice_yaml_get(y, node, "key")))
		return each_string(y, v, what, add_source, r);
	r->sources[0].parts[0].kind = SLUICE_KEY_IP;
	r->sources[0].nparts = 1;
	r->nsources = 1;
	return 0;
}

/* limits or tiers, exactly one of them: 1 when they parsed (so the cost
 * can be checked against them), -1 (reported) when not. */
static int parse_rule_limits(sluice_yaml_t *y, yaml_node_t *node,
			     sluice_rule_t *r, const char *rule)
{
	yaml_node_t *lim = sluice_yaml_get(y, node, "limits");
	yaml_node_t *tiers = sluice_yaml_get(y, node, "tiers");
	char what[256];

	snprintf(what, sizeof(what), "%s: limits", rule);
	if (lim && tiers)
		return sluice_yaml_error(y, tiers,
					 "%s has both limits and tiers; "
					 "expected one of them",
					 rule);
	if (!lim && !tiers)
		return sluice_yaml_error(y, node,
					 "%s has no limits; expected "
					 "limits: [{capacity: 100, rate: "
					 "2/s}] or tiers: {...}",
					 rule);
	if (lim && sluice_config_parse_limits(y, lim, &r->limits, what) < 0)
		return -1;
	if (tiers && parse_tiers(y, tiers, r, rule) < 0)
		return -1;
	return 1;
}

/* on_store_error: open | closed | local. */
static int parse_on_store_error(sluice_yaml_t *y, yaml_node_t *v,
				sluice_rule_t *r, const char *rule)
{
	const char *s;
	char what[256];

	snprintf(what, sizeof(what), "%s: on_store_error", rule);
	if (sluice_yaml_string(y, v, what, &s) < 0)
		return -1;
	if (strcmp(s, "open") == 0)
		r->on_store_error = SLUICE_FAIL_OPEN;
	else if (strcmp(s, "closed") == 0)
		r->on_store_error = SLUICE_FAIL_CLOSED;
	else if (strcmp(s, "local") == 0)
		r->on_store_error = SLUICE_FAIL_LOCAL;
	else
		return sluice_yaml_error(y, v,
					 "%s is \"%.60s\"; expected "
					 "open, closed or local",
					 what, s);
	return 0;
}

/* Reads one rule.  After an error the other fields are still read (so
 * check-config reports them too), except where they depend on the failed
 * one (the cost is checked against limits only when they parsed). */
static int parse_rule(sluice_yaml_t *y, yaml_node_t *node, sluice_rule_t *r,
		      size_t idx)
{
	static const char *const keys[] = {
		"name",		  "match",  "key",
		"limits",	  "tiers",  "cost",
		"on_store_error", "shadow", "overrides",
		"overrides_file", NULL};
	char rule[128], what[256];
	yaml_node_t *v, *ovf;
	uint64_t u;
	int rc = 0, limits_ok;

	snprintf(rule, sizeof(rule), "rules[%zu]", idx);
	if (sluice_yaml_expect_map(y, node, rule) < 0)
		return -1;
	if (sluice_yaml_check_keys(y, node, rule, keys) < 0)
		rc = -1;
	r->line = sluice_yaml_line(node);
	r->cost = 1;
	switch (parse_rule_name(y, node, r, rule, sizeof(rule))) {
	case 0:
		break;
	case SLUICE_ENOMEM:
		return -1;
	default:
		rc = -1;
	}
	if ((v = sluice_yaml_get(y, node, "match")) &&
	    parse_match(y, v, r, rule) < 0)
		rc = -1;
	if (parse_rule_key(y, node, r, rule) < 0)
		rc = -1;
	if ((limits_ok = parse_rule_limits(y, node, r, rule)) < 0)
		rc = -1;
	v = sluice_yaml_get(y, node, "overrides");
	ovf = sluice_yaml_get(y, node, "overrides_file");
	if ((v || ovf) && sluice_config_parse_overrides(y, v, ovf, r, rule) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "cost"))) {
		snprintf(what, sizeof(what), "%s: cost", rule);
		if (sluice_yaml_uint(y, v, what, 1, 1000000000, &u) < 0) {
			rc = -1;
		} else {
			r->cost = u;
			if (limits_ok > 0 && check_cost(y, v, r, rule) < 0)
				rc = -1;
		}
	}
	if ((v = sluice_yaml_get(y, node, "on_store_error")) &&
	    parse_on_store_error(y, v, r, rule) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "shadow"))) {
		snprintf(what, sizeof(what), "%s: shadow", rule);
		if (sluice_yaml_bool(y, v, what, &r->shadow) < 0)
			rc = -1;
	}
	return rc;
}

int sluice_config_parse_rules(sluice_yaml_t *y, yaml_node_t *node,
			      sluice_config_t *cfg)
{
	size_t i, j, n;
	int rc = 0;

	if (sluice_yaml_expect_seq(y, node, "rules") < 0)
		return -1;
	n = sluice_yaml_seq_len(node);
	if (n == 0 || n > RULES_MAX)
		return sluice_yaml_error(y, node,
					 "rules has %zu entries; expected 1 to "
					 "%d rules",
					 n, RULES_MAX);
	cfg->rules = calloc(n, sizeof(*cfg->rules));
	if (!cfg->rules)
		return sluice_yaml_nomem(y, node);
	cfg->nrules = n;
	for (i = 0; i < n; i++) {
		yaml_node_t *it = sluice_yaml_seq_at(y, node, i);

		if (parse_rule(y, it, &cfg->rules[i], i) < 0)
			rc = -1;
		/* A rule whose name failed has none to compare. */
		for (j = 0; j < i && cfg->rules[i].name; j++)
			if (cfg->rules[j].name &&
			    strcmp(cfg->rules[j].name, cfg->rules[i].name) ==
				    0) {
				rc = sluice_yaml_error(
					y, sluice_yaml_get(y, it, "name"),
					"rule name \"%s\" is used twice (first "
					"on line %d); expected unique rule "
					"names",
					cfg->rules[i].name, cfg->rules[j].line);
				break;
			}
	}
	return rc;
}
