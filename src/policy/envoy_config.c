/*
 * envoy_config.c -- loading a directory of envoyproxy/ratelimit YAML files.
 *
 * Every file is read and every error reported (check-config shows them
 * all), each naming its file and line; a directory with any error is
 * refused as a whole, so a reload never half-applies.  The checks are
 * envoyproxy/ratelimit's (empty or duplicate domain, empty key, duplicate
 * key/value at one level, unknown field, bad unit, a unit on an unlimited
 * limit, an empty `replaces` or one naming its own limit, share_threshold
 * without a wildcard), made per level rather than against one list of
 * every field name, so a field in the wrong place is caught too.
 */
#include "policy/envoy_config.h"
#include "policy/config_internal.h"
#include "policy/envoy_metrics.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* ------------------------------------------------------------- settings */

void sluice_envoy_settings_init(sluice_envoy_settings_t *s)
{
	memset(s, 0, sizeof(*s));
	s->near_limit_percent = 80;
	s->on_store_error = SLUICE_FAIL_CLOSED;
	s->watch_ms = 1000;
}

static void settings_free(sluice_envoy_settings_t *s)
{
	free(s->config_dir);
	free(s->header_limit);
	free(s->header_remaining);
	free(s->header_reset);
}

/* ------------------------------------------------------------- freeing */

static void free_limit(sluice_envoy_limit_t *l)
{
	size_t i;

	if (!l)
		return;
	free(l->name);
	for (i = 0; i < l->nreplaces; i++)
		free(l->replaces[i]);
	free(l->replaces);
	free(l->rule.name);
	free(l);
}

static void free_nodes(sluice_envoy_node_t *nodes, size_t n)
{
	size_t i, j;

	for (i = 0; i < n; i++) {
		sluice_envoy_node_t *d = &nodes[i];

		free(d->key);
		free(d->value);
		for (j = 0; j < d->nparts; j++)
			free(d->parts[j]);
		free(d->parts);
		free_limit(d->limit);
		free_nodes(d->children, d->nchildren);
		free(d->stat_key);
	}
	free(nodes);
}

void sluice_envoy_config_free(sluice_envoy_config_t *cfg)
{
	size_t i;

	if (!cfg)
		return;
	for (i = 0; i < cfg->ndomains; i++) {
		free(cfg->domains[i].name);
		free_nodes(cfg->domains[i].children, cfg->domains[i].nchildren);
	}
	free(cfg->domains);
	for (i = 0; i < cfg->nfiles; i++)
		free(cfg->files[i]);
	free(cfg->files);
	free(cfg->dir);
	settings_free(&cfg->settings);
	free(cfg->override_rule.name);
	free(cfg);
}

/* --------------------------------------------------------- one file */

/* What the parser of one file carries. */
typedef struct load_s {
	sluice_yaml_t *y;
	sluice_envoy_config_t *cfg;
	const char *file; /* cfg's copy of the path */
	const char *domain;
} load_t;

static char *join(const char *a, const char *sep, const char *b,
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

static int parse_rate_limit(load_t *L, yaml_node_t *v, sluice_envoy_node_t *d,
			    int shadow)
{
	static const char *const keys[] = {"unit",	"requests_per_unit",
					   "unlimited", "name",
					   "replaces",	"burst",
					   "limits",	NULL};
	static const char *const lim_keys[] = {"unit", "requests_per_unit",
					       "burst", NULL};
	sluice_envoy_limit_t *l;
	yaml_node_t *x, *lims;
	const char *s;
	int rc = 0;
	size_t i, n;

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
	l->rule.name = join(L->domain, ".", d->stat_key, "", NULL);
	if (!l->rule.name)
		return sluice_yaml_nomem(L->y, v);
	l->rule.shadow = shadow;
	l->rule.on_store_error = L->cfg->settings.on_store_error;
	l->rule.cost = 1;
	l->rule.line = sluice_yaml_line(v);
	if (l->unlimited) {
		if ((x = sluice_yaml_get(L->y, v, "unit")) &&
		    !sluice_yaml_is_null(x) &&
		    sluice_envoy_unit_parse(
			    (const char *)x->data.scalar.value) !=
			    SLUICE_RLS_UNIT_UNKNOWN)
			return sluice_yaml_error(L->y, x,
						 "should not specify rate "
						 "limit unit when unlimited");
		if (lims)
			return sluice_yaml_error(L->y, lims,
						 "limits with unlimited; "
						 "expected one or the other");
		return rc;
	}
	if (!lims) {
		l->set.nlimits = 1;
		return parse_one_limit(L, v, l, 0, "rate_limit") < 0 ? -1 : rc;
	}
	/* sluice's extension: several limits, all of which must pass. */
	for (i = 0; i < 3; i++) {
		static const char *const single[] = {
			"unit", "requests_per_unit", "burst"};

		if ((x = sluice_yaml_get_key(L->y, v, single[i])))
			return sluice_yaml_error(L->y, x,
						 "%s beside limits; expected "
						 "it in each item of limits",
						 single[i]);
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
	d->stat_key = join(parent, *parent ? "." : "", d->key, "_", d->value);
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
	if ((x = sluice_yaml_get(L->y, it, "rate_limit")) &&
	    parse_rate_limit(L, x, d, d->shadow_mode || d->quota_mode) < 0)
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

static int same_str(const char *a, const char *b)
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
			if (same_str((*out)[j].key, d->key) &&
			    same_str((*out)[j].value, d->value)) {
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

static int parse_file(load_t *L, yaml_node_t *root, sluice_envoy_domain_t *dom)
{
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

/* ------------------------------------------------------- the directory */

typedef struct errs_s {
	char *err;
	size_t errlen;
	char *report;
	size_t reportlen, reportused;
	unsigned max_errors, nerrors;
} errs_t;

static void errs_line(errs_t *e, const char *line)
{
	sluice_yaml_t y = {.err = e->err,
			   .errlen = e->errlen,
			   .report = e->report,
			   .reportlen = e->reportlen,
			   .reportused = e->reportused,
			   .max_errors = e->max_errors,
			   .nerrors = e->nerrors};

	if (!e->nerrors && e->errlen)
		snprintf(e->err, e->errlen, "%s", line);
	sluice_yaml_report(&y, line);
	e->reportused = y.reportused;
	e->nerrors = y.nerrors;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_config_name(const char *n)
{
	size_t len = strlen(n);

	/* Dot files are skipped: a Kubernetes ConfigMap volume holds
	 * "..data" and "..2024_..." beside the files' symlinks. */
	if (n[0] == '.')
		return 0;
	return (len > 5 && strcmp(n + len - 5, ".yaml") == 0) ||
	       (len > 4 && strcmp(n + len - 4, ".yml") == 0);
}

/* The sorted paths of dir's *.yaml / *.yml regular files (symlinks to
 * them included).  Returns 0, or -1 with a message. */
static int list_dir(const char *dir, sluice_envoy_config_t *cfg, errs_t *e)
{
	char line[1200];
	struct dirent *de;
	DIR *dp = opendir(dir);
	size_t cap = 0;

	if (!dp) {
		snprintf(line, sizeof(line),
			 "%.900s:1: cannot open the directory: %s; expected "
			 "a readable directory of envoyproxy/ratelimit YAML "
			 "files",
			 dir, strerror(errno));
		errs_line(e, line);
		return -1;
	}
	while ((de = readdir(dp))) {
		struct stat st;
		char *path;

		if (!is_config_name(de->d_name))
			continue;
		if (!(path = join(dir, "/", de->d_name, "", NULL)))
			goto nomem;
		if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
			free(path); /* a directory named x.yaml, a dangling
				       link: not a file to read */
			continue;
		}
		if (cfg->nfiles == SLUICE_ENVOY_MAX_FILES) {
			snprintf(line, sizeof(line),
				 "%.900s:1: more than %d YAML files; expected "
				 "fewer",
				 dir, SLUICE_ENVOY_MAX_FILES);
			free(path);
			closedir(dp);
			errs_line(e, line);
			return -1;
		}
		if (cfg->nfiles == cap) {
			char **nf;

			cap = cap ? cap * 2 : 16;
			if (!(nf = realloc(cfg->files, cap * sizeof(*nf)))) {
				free(path);
				goto nomem;
			}
			cfg->files = nf;
		}
		cfg->files[cfg->nfiles++] = path;
	}
	closedir(dp);
	if (cfg->nfiles)
		qsort(cfg->files, cfg->nfiles, sizeof(char *), cmp_str);
	return 0;
nomem:
	closedir(dp);
	snprintf(line, sizeof(line), "%.900s:1: out of memory", dir);
	errs_line(e, line);
	return -1;
}

/* Parses one file's text as files[f] into the next domain. */
static int load_text(sluice_envoy_config_t *cfg, size_t f, const char *text,
		     size_t len, int quotable, errs_t *e)
{
	char first[1024], line[1024];
	sluice_yaml_t y = {.name = cfg->files[f],
			   .err = first,
			   .errlen = sizeof(first),
			   .report = e->report,
			   .reportlen = e->reportlen,
			   .reportused = e->reportused,
			   .max_errors = e->max_errors,
			   .nerrors = e->nerrors,
			   .withhold = !quotable};
	load_t L = {.y = &y, .cfg = cfg, .file = cfg->files[f]};
	sluice_envoy_domain_t *dom = &cfg->domains[cfg->ndomains];
	unsigned before = e->nerrors;
	int rc;

	first[0] = '\0';
	if (sluice_yaml_load(&y, text, len) < 0) {
		/* The loader writes its one message into y.err only. */
		snprintf(line, sizeof(line), "%s", first);
		errs_line(e, line);
		return -1;
	}
	cfg->ndomains++;
	rc = parse_file(&L, sluice_yaml_root(&y), dom);
	sluice_yaml_free(&y);
	e->reportused = y.reportused;
	e->nerrors = y.nerrors;
	if (before == 0 && e->nerrors && e->errlen)
		snprintf(e->err, e->errlen, "%s", first);
	return rc < 0 || e->nerrors > before ? -1 : 0;
}

static int load_file(sluice_envoy_config_t *cfg, size_t f, errs_t *e)
{
	char line[1024];
	char *text;
	size_t len;
	int rc, quotable = 0;

	if (sluice_config_read_file(cfg->files[f], &text, &len, &quotable, line,
				    sizeof(line)) < 0) {
		errs_line(e, line);
		return -1;
	}
	rc = load_text(cfg, f, text, len, quotable, e);
	free(text);
	return rc;
}

static int cmp_domain(const void *a, const void *b)
{
	const sluice_envoy_domain_t *x = a, *y = b;
	int c = strcmp(x->name ? x->name : "", y->name ? y->name : "");

	/* Equal names stay in file order, so the later file is named. */
	if (!c)
		c = strcmp(x->file, y->file);
	return c;
}

static int same_str(const char *a, const char *b);

/* MERGE_DOMAIN_CONFIG: b's top-level descriptors join a's, as
 * envoyproxy/ratelimit loads a second file of a domain into the first (a
 * key/value both give is an error). */
static void merge_into(sluice_envoy_domain_t *a, sluice_envoy_domain_t *b,
		       errs_t *e)
{
	char line[1400];
	sluice_envoy_node_t *n;
	size_t i, j, na = a->nchildren;

	for (i = 0; i < b->nchildren; i++)
		for (j = 0; j < na; j++)
			if (same_str(a->children[j].key, b->children[i].key) &&
			    same_str(a->children[j].value,
				     b->children[i].value)) {
				snprintf(line, sizeof(line),
					 "%.500s:%d: duplicate descriptor "
					 "composite key '%.100s.%.200s' (also "
					 "in %.400s:%d); expected each "
					 "key/value once per level",
					 b->children[i].file,
					 b->children[i].line, a->name,
					 b->children[i].stat_key,
					 a->children[j].file,
					 a->children[j].line);
				errs_line(e, line);
			}
	n = realloc(a->children, (na + b->nchildren + 1) * sizeof(*n));
	if (!n) {
		snprintf(line, sizeof(line), "%.500s:%d: out of memory",
			 b->file, b->line);
		errs_line(e, line);
		return;
	}
	if (b->nchildren)
		memcpy(n + na, b->children, b->nchildren * sizeof(*n));
	a->children = n;
	a->nchildren = na + b->nchildren;
	free(b->children); /* the nodes moved; what they own did not */
	b->children = NULL;
	b->nchildren = 0;
}

static void check_domains(sluice_envoy_config_t *cfg, errs_t *e)
{
	char line[1200];
	size_t i, out = 0;

	qsort(cfg->domains, cfg->ndomains, sizeof(*cfg->domains), cmp_domain);
	for (i = 0; i < cfg->ndomains; i++) {
		sluice_envoy_domain_t *a = out ? &cfg->domains[out - 1] : NULL,
				      *b = &cfg->domains[i];

		if (!a || !a->name || !b->name ||
		    strcmp(a->name, b->name) != 0) {
			cfg->domains[out++] = *b;
			continue;
		}
		if (cfg->settings.merge_domains) {
			merge_into(a, b, e);
			free(b->name);
			continue;
		}
		snprintf(line, sizeof(line),
			 "%.500s:%d: duplicate domain '%.100s' in config file "
			 "(also in %.400s:%d); expected each domain in one "
			 "file (or envoy.merge_domains: true)",
			 b->file, b->line, b->name, a->file, a->line);
		errs_line(e, line);
		cfg->domains[out++] = *b;
	}
	cfg->ndomains = out;
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static int copy_settings(sluice_envoy_settings_t *d,
			 const sluice_envoy_settings_t *s)
{
	*d = *s;
	d->config_dir = dup_or_null(s->config_dir);
	d->header_limit =
		strdup(s->header_limit ? s->header_limit : "RateLimit-Limit");
	d->header_remaining =
		strdup(s->header_remaining ? s->header_remaining
					   : "RateLimit-Remaining");
	d->header_reset =
		strdup(s->header_reset ? s->header_reset : "RateLimit-Reset");
	return (s->config_dir && !d->config_dir) || !d->header_limit ||
			       !d->header_remaining || !d->header_reset
		       ? -1
		       : 0;
}

sluice_envoy_config_t *
sluice_envoy_load_dir(const char *dir, const sluice_envoy_settings_t *settings,
		      char *err, size_t errlen, char *report, size_t reportlen,
		      unsigned max_errors, unsigned *nerrors)
{
	errs_t e = {.err = err,
		    .errlen = errlen,
		    .report = report,
		    .reportlen = reportlen,
		    .max_errors = max_errors};
	sluice_envoy_config_t *cfg = calloc(1, sizeof(*cfg));
	size_t f;
	char line[1100];

	if (errlen)
		err[0] = '\0';
	if (report && reportlen)
		report[0] = '\0';
	if (!cfg || copy_settings(&cfg->settings, settings) < 0 ||
	    !(cfg->dir = strdup(dir)) ||
	    !(cfg->override_rule.name = strdup("override"))) {
		snprintf(line, sizeof(line), "%.900s:1: out of memory", dir);
		errs_line(&e, line);
		goto fail;
	}
	cfg->override_rule.cost = 1;
	cfg->override_rule.on_store_error = cfg->settings.on_store_error;
	if (list_dir(dir, cfg, &e) < 0)
		goto fail;
	if (!(cfg->domains = calloc(cfg->nfiles ? cfg->nfiles : 1,
				    sizeof(*cfg->domains)))) {
		snprintf(line, sizeof(line), "%.900s:1: out of memory", dir);
		errs_line(&e, line);
		goto fail;
	}
	for (f = 0; f < cfg->nfiles; f++)
		load_file(cfg, f, &e);
	check_domains(cfg, &e);
	if (e.nerrors)
		goto fail;
	if (nerrors)
		*nerrors = 0;
	return cfg;
fail:
	if (nerrors)
		*nerrors = e.nerrors ? e.nerrors : 1;
	sluice_envoy_config_free(cfg);
	return NULL;
}

sluice_envoy_config_t *
sluice_envoy_load_text(const char *name, const char *text, size_t len,
		       const sluice_envoy_settings_t *settings, char *err,
		       size_t errlen)
{
	errs_t e = {.err = err, .errlen = errlen};
	sluice_envoy_config_t *cfg = calloc(1, sizeof(*cfg));

	if (errlen)
		err[0] = '\0';
	if (!cfg || copy_settings(&cfg->settings, settings) < 0 ||
	    !(cfg->dir = strdup("")) ||
	    !(cfg->override_rule.name = strdup("override")) ||
	    !(cfg->files = calloc(1, sizeof(char *))) ||
	    !(cfg->files[0] = strdup(name)) ||
	    !(cfg->domains = calloc(1, sizeof(*cfg->domains)))) {
		if (cfg && cfg->files && cfg->files[0])
			cfg->nfiles = 1;
		sluice_envoy_config_free(cfg);
		snprintf(err, errlen, "%s:1: out of memory", name);
		return NULL;
	}
	cfg->nfiles = 1;
	cfg->override_rule.cost = 1;
	cfg->override_rule.on_store_error = cfg->settings.on_store_error;
	if (load_text(cfg, 0, text, len, 1, &e) < 0 || e.nerrors) {
		sluice_envoy_config_free(cfg);
		return NULL;
	}
	return cfg;
}

static int cmp_key(const void *key, const void *elem)
{
	const sluice_envoy_domain_t *d = elem;

	return strcmp(key, d->name);
}

const sluice_envoy_domain_t *
sluice_envoy_domain(const sluice_envoy_config_t *cfg, const char *name)
{
	if (!cfg || !cfg->ndomains)
		return NULL;
	return bsearch(name, cfg->domains, cfg->ndomains, sizeof(*cfg->domains),
		       cmp_key);
}
