/*
 * config.c -- loading a directory of envoyproxy/ratelimit YAML files
 * (each file parsed by file.c), and the loaded config's lifetime.
 *
 * Every file is read and every error reported (check-config shows them
 * all), each naming its file and line; a directory with any error is
 * refused as a whole, so a reload never half-applies.  Checked here: what
 * spans files (a domain in two files, unless merge_domains); each file's
 * own checks are file.c's.
 */
#include "policy/envoy/config.h"
#include "policy/config/internal.h"
#include "policy/envoy/internal.h"
#include "policy/envoy/meta.h"
#include "policy/envoy/metrics.h"
#include "policy/envoy/xds.h"
#include "util/log.h"

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
	s->trusted_group = (gid_t)-1;
	s->metrics_style = SLUICE_ENVOY_METRICS_SLUICE;
	s->statsd_flush_ms = 10000; /* STATS_FLUSH_INTERVAL's default */
}

void sluice_envoy_settings_free(sluice_envoy_settings_t *s)
{
	free(s->config_dir);
	free(s->header_limit);
	free(s->header_remaining);
	free(s->header_reset);
	free(s->statsd_addr);
	free(s->statsd_prefix);
	free(s->statsd_tags);
	free(s->cache_key_prefix);
	sluice_envoy_xds_free(s->xds);
	free(s->calendar_domains);
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
	free(l->set.carry);
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
		sluice_meta_free(d->metadata);
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
	sluice_buf_free(&cfg->skipped);
	sluice_envoy_settings_free(&cfg->settings);
	free(cfg->override_rule.name);
	free(cfg);
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

/* What list_dir() gathers while walking the directory. */
typedef struct listing_s {
	sluice_envoy_config_t *cfg;
	errs_t *e;
	const char *dir;
	size_t cap;
	unsigned nskipped;
	int failed;
} listing_t;

/* Each file the loader does not read is named, so that a file the
 * operator meant to load (config.json, a folder of dot files) is not
 * lost silently; a flood of them is cut short. */
#define MAX_SKIP_LINES 32

static void on_skip(void *arg, const char *path, const char *why)
{
	listing_t *l = arg;
	sluice_buf_t *b = &l->cfg->skipped;

	/* Kept, not logged here: loading has no side effects (a reload
	 * may yet be refused), and the host logs them once the config's
	 * own log settings apply (sluice_envoy_log_skipped()). */
	if (l->nskipped++ < MAX_SKIP_LINES)
		sluice_buf_printf(b, "envoy.config_dir: skipped %s: %s\n", path,
				  why);
	else if (l->nskipped == MAX_SKIP_LINES + 1)
		sluice_buf_printf(b,
				  "envoy.config_dir: skipped more entries "
				  "under %s; not naming them all\n",
				  l->dir);
}

void sluice_envoy_log_skipped(const sluice_envoy_config_t *cfg)
{
	const char *p, *nl;

	if (!cfg || cfg->skipped.oom)
		return;
	for (p = cfg->skipped.data, nl = NULL;
	     p && p < cfg->skipped.data + cfg->skipped.len; p = nl + 1) {
		nl = memchr(p, '\n',
			    (size_t)(cfg->skipped.data + cfg->skipped.len - p));
		if (!nl)
			break;
		sluice_log_info("%.*s", (int)(nl - p), p);
	}
}

static int on_file(void *arg, const char *path, const struct stat *st)
{
	listing_t *l = arg;
	sluice_envoy_config_t *cfg = l->cfg;
	char line[1200];
	char *copy;

	(void)st;
	if (cfg->nfiles == SLUICE_ENVOY_MAX_FILES) {
		snprintf(line, sizeof(line),
			 "%.900s:1: more than %d YAML files; expected fewer",
			 l->dir, SLUICE_ENVOY_MAX_FILES);
		errs_line(l->e, line);
		return l->failed = -1;
	}
	if (cfg->nfiles == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		char **nf = realloc(cfg->files, cap * sizeof(*nf));

		if (!nf)
			goto nomem;
		cfg->files = nf;
		l->cap = cap;
	}
	if (!(copy = strdup(path)))
		goto nomem;
	cfg->files[cfg->nfiles++] = copy;
	return 0;
nomem:
	snprintf(line, sizeof(line), "%.900s:1: out of memory", l->dir);
	errs_line(l->e, line);
	return l->failed = -1;
}

/* The sorted paths of dir's *.yaml / *.yml regular files (symlinks to
 * them included), in nested folders too; every other entry is named in
 * the log.  Returns 0, or -1 with a message. */
static int list_dir(const char *dir, sluice_envoy_config_t *cfg, errs_t *e)
{
	listing_t l = {.cfg = cfg, .e = e, .dir = dir};
	char line[1200];

	if (sluice_envoy_walk(dir, on_file, on_skip, &l) < 0 && !l.failed) {
		snprintf(line, sizeof(line),
			 "%.900s:1: cannot open the directory: %s; expected "
			 "a readable directory of envoyproxy/ratelimit YAML "
			 "files",
			 dir, strerror(errno));
		errs_line(e, line);
		return -1;
	}
	if (l.failed)
		return -1;
	if (cfg->nfiles)
		qsort(cfg->files, cfg->nfiles, sizeof(char *), cmp_str);
	return 0;
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
	rc = sluice_envoy_parse_file(&y, cfg, cfg->files[f],
				     sluice_yaml_root(&y), dom);
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
	const sluice_envoy_settings_t *s = &cfg->settings;
	sluice_file_trust_t trust = {.uids = s->trusted_uids,
				     .nuids = s->ntrusted_uids,
				     .group = s->trusted_group};
	char *text;
	size_t len;
	int rc, quotable = 0;

	if (sluice_config_read_file_trusted(
		    cfg->files[f],
		    s->ntrusted_uids || s->trusted_group != (gid_t)-1 ? &trust
								      : NULL,
		    &text, &len, &quotable, line, sizeof(line)) < 0) {
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
			if (sluice_envoy_same_str(a->children[j].key,
						  b->children[i].key) &&
			    sluice_envoy_same_str(a->children[j].value,
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

/* ------------------------------------------------ replaces, one way */

/* The nodes of a tree that have a limit with a name or a replaces list,
 * appended to *v (room grown as needed); -1 when out of memory. */
static int gather(const sluice_envoy_node_t *nodes, size_t n,
		  const sluice_envoy_node_t ***v, size_t *len, size_t *cap)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const sluice_envoy_limit_t *l = nodes[i].limit;

		if (l && (l->name || l->nreplaces)) {
			if (*len == *cap) {
				size_t c = *cap ? *cap * 2 : 16;
				void *p = realloc(*v, c * sizeof(**v));

				if (!p)
					return -1;
				*v = p;
				*cap = c;
			}
			(*v)[(*len)++] = &nodes[i];
		}
		if (gather(nodes[i].children, nodes[i].nchildren, v, len, cap) <
		    0)
			return -1;
	}
	return 0;
}

/* 1 when a's limit replaces b's (by name). */
static int replaces(const sluice_envoy_node_t *a, const sluice_envoy_node_t *b)
{
	size_t k;

	if (!b->limit->name)
		return 0;
	for (k = 0; k < a->limit->nreplaces; k++)
		if (strcmp(a->limit->replaces[k], b->limit->name) == 0)
			return 1;
	return 0;
}

/*
 * A request matching every limit of a `replaces` cycle (a replaces b,
 * b replaces a) would drop them all -- no limit at all -- so a cycle is
 * refused, each of its limits named with its file and line.  The limits
 * left once those that replace nothing left, or that nothing left
 * replaces, are peeled off (repeatedly, both ways) are exactly those on
 * or between cycles.
 */
static void check_replaces(const sluice_envoy_domain_t *dom, errs_t *e)
{
	const sluice_envoy_node_t **v = NULL;
	size_t n = 0, cap = 0, i, j, left;
	unsigned char *gone = NULL;
	char line[1200];
	int changed;

	if (gather(dom->children, dom->nchildren, &v, &n, &cap) < 0 ||
	    (n && !(gone = calloc(n, 1)))) {
		snprintf(line, sizeof(line), "%.500s:%d: out of memory",
			 dom->file, dom->line);
		errs_line(e, line);
		free(v);
		return;
	}
	left = n;
	do {
		changed = 0;
		for (i = 0; i < n; i++) {
			int in = 0, out = 0;

			if (gone[i])
				continue;
			for (j = 0; j < n && !(in && out); j++) {
				if (gone[j])
					continue;
				out |= replaces(v[i], v[j]);
				in |= replaces(v[j], v[i]);
			}
			if (!in || !out) {
				gone[i] = 1;
				left--;
				changed = 1;
			}
		}
	} while (changed && left);
	for (i = 0; i < n; i++) {
		if (gone[i])
			continue;
		for (j = 0; j < n && (gone[j] || !replaces(v[i], v[j])); j++)
			;
		snprintf(line, sizeof(line),
			 "%.400s:%d: rate_limit '%.100s' replaces '%.100s', "
			 "and replaces lead back to it (a cycle): a "
			 "request matching them all would have no limit; "
			 "expected replaces to run one way",
			 v[i]->file ? v[i]->file : dom->file, v[i]->line,
			 v[i]->limit->name ? v[i]->limit->name : "",
			 j < n ? v[j]->limit->name : "");
		errs_line(e, line);
	}
	free(gone);
	free(v);
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
	for (i = 0; i < cfg->ndomains; i++)
		check_replaces(&cfg->domains[i], e);
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
	d->statsd_addr = dup_or_null(s->statsd_addr);
	d->statsd_prefix = strdup(s->statsd_prefix ? s->statsd_prefix : "");
	d->statsd_tags = dup_or_null(s->statsd_tags);
	d->cache_key_prefix =
		strdup(s->cache_key_prefix ? s->cache_key_prefix : "");
	d->xds = s->xds ? sluice_envoy_xds_copy(s->xds) : NULL;
	d->calendar_domains = dup_or_null(s->calendar_domains);
	return (s->calendar_domains && !d->calendar_domains) ||
			       (s->config_dir && !d->config_dir) ||
			       (s->xds && !d->xds) || !d->header_limit ||
			       !d->cache_key_prefix || !d->header_remaining ||
			       !d->header_reset ||
			       (s->statsd_addr && !d->statsd_addr) ||
			       !d->statsd_prefix ||
			       (s->statsd_tags && !d->statsd_tags)
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
	/* Before listing and reading: see the field. */
	cfg->stamp = sluice_envoy_dir_stamp(dir);
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
	if (load_text(cfg, 0, text, len, 1, &e) == 0)
		check_replaces(&cfg->domains[0], &e);
	if (e.nerrors) {
		sluice_envoy_config_free(cfg);
		return NULL;
	}
	return cfg;
}

sluice_envoy_config_t *
sluice_envoy_load_texts(const sluice_envoy_text_t *texts, size_t n,
			const sluice_envoy_settings_t *settings, char *err,
			size_t errlen)
{
	errs_t e = {.err = err, .errlen = errlen, .max_errors = 1};
	sluice_envoy_config_t *cfg = calloc(1, sizeof(*cfg));
	size_t f;

	if (errlen)
		err[0] = '\0';
	if (!cfg || copy_settings(&cfg->settings, settings) < 0 ||
	    !(cfg->dir = strdup("")) ||
	    !(cfg->override_rule.name = strdup("override")) ||
	    !(cfg->files = calloc(n ? n : 1, sizeof(char *))) ||
	    !(cfg->domains = calloc(n ? n : 1, sizeof(*cfg->domains))))
		goto nomem;
	cfg->override_rule.cost = 1;
	cfg->override_rule.on_store_error = cfg->settings.on_store_error;
	for (f = 0; f < n; f++)
		if (!(cfg->files[cfg->nfiles++] = strdup(texts[f].name)))
			goto nomem;
	for (f = 0; f < n && !e.nerrors; f++)
		load_text(cfg, f, texts[f].text, texts[f].len, 1, &e);
	if (!e.nerrors)
		check_domains(cfg, &e);
	if (e.nerrors) {
		sluice_envoy_config_free(cfg);
		return NULL;
	}
	return cfg;
nomem:
	sluice_envoy_config_free(cfg);
	snprintf(err, errlen, "out of memory");
	return NULL;
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

/* ------------------------------------------------------------ the dump */

static void dump_nodes(const sluice_envoy_domain_t *dom,
		       const sluice_envoy_node_t *nodes, size_t n,
		       sluice_buf_t *out)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const sluice_envoy_node_t *d = &nodes[i];
		const sluice_envoy_limit_t *l = d->limit;

		if (l)
			sluice_buf_printf(
				out,
				"%s.%s: unit=%s requests_per_unit=%u, "
				"shadow_mode: %s, quota_mode: %s\n",
				dom->name, d->stat_key,
				l->unlimited ? "UNKNOWN"
					     : sluice_envoy_unit_name(
						       l->units[0].unit),
				l->unlimited ? 0u
					     : l->units[0].requests_per_unit,
				d->shadow_mode ? "true" : "false",
				d->quota_mode ? "true" : "false");
		dump_nodes(dom, d->children, d->nchildren, out);
	}
}

void sluice_envoy_dump(const sluice_envoy_config_t *cfg, sluice_buf_t *out)
{
	size_t i;

	for (i = 0; cfg && i < cfg->ndomains; i++)
		dump_nodes(&cfg->domains[i], cfg->domains[i].children,
			   cfg->domains[i].nchildren, out);
}
