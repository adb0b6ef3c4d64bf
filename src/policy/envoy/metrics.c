/*
 * metrics.c -- the registry of Envoy descriptor series (see
 * metrics.h).
 */
#include "policy/envoy/metrics.h"
#include "util/invariant.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 1024

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static sluice_envoy_series_t *table[NBUCKETS];
static sluice_envoy_series_t *all;
static size_t nseries;
static size_t nbytes; /* label bytes of every series (domain, path) */
/* When even the overflow series cannot be made (out of memory). */
static sluice_envoy_series_t lost = {.domain = "", .path = "_lost"};

static size_t hash(const char *a, const char *b)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	for (; *a; a++)
		h = (h ^ (unsigned char)*a) * 1099511628211ull;
	h = (h ^ 0xff) * 1099511628211ull;
	for (; *b; b++)
		h = (h ^ (unsigned char)*b) * 1099511628211ull;
	return (size_t)(h % NBUCKETS);
}

/* With the lock held: the series, found or made (NULL: out of memory). */
static sluice_envoy_series_t *get(const char *domain, const char *path,
				  int may_add)
{
	size_t h = hash(domain, path);
	sluice_envoy_series_t *s;

	for (s = table[h]; s; s = s->next)
		if (strcmp(s->domain, domain) == 0 &&
		    strcmp(s->path, path) == 0)
			return s;
	if (!may_add || !(s = calloc(1, sizeof(*s))))
		return NULL;
	if (!(s->domain = strdup(domain)) || !(s->path = strdup(path))) {
		free(s->domain);
		free(s);
		return NULL;
	}
	s->next = table[h];
	table[h] = s;
	s->all = all;
	all = s;
	nseries++;
	nbytes += strlen(domain) + strlen(path);
	return s;
}

/*
 * A label value as kept: at most SLUICE_ENVOY_MAX_LABEL bytes.  A longer
 * one (a client's header in a detailed_metric path) keeps its head and
 * ends in "~" and 16 hex digits of a hash of the whole, so that values
 * which differ after the head still count apart.
 */
static const char *bounded(const char *v, char *out)
{
	size_t n = strlen(v), head = SLUICE_ENVOY_MAX_LABEL - 17;
	uint64_t h = 1469598103934665603ull;
	size_t i;

	if (n <= SLUICE_ENVOY_MAX_LABEL)
		return v;
	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)v[i]) * 1099511628211ull;
	memcpy(out, v, head);
	snprintf(out + head, 18, "~%016llx", (unsigned long long)h);
	return out;
}

sluice_envoy_series_t *sluice_envoy_series(const char *domain, const char *path)
{
	char bd[SLUICE_ENVOY_MAX_LABEL + 1], bp[SLUICE_ENVOY_MAX_LABEL + 1];
	sluice_envoy_series_t *s;

	domain = bounded(domain, bd);
	path = bounded(path, bp);
	pthread_mutex_lock(&lock);
	/* Past either cap, counts go to the domain's overflow series. */
	s = get(domain, path,
		nseries < SLUICE_ENVOY_MAX_SERIES &&
			nbytes + strlen(domain) + strlen(path) <=
				SLUICE_ENVOY_MAX_SERIES_BYTES);
	if (!s)
		s = get(domain, "_overflow", 1);
	pthread_mutex_unlock(&lock);
	return s ? s : &lost;
}

size_t sluice_envoy_series_bytes(void)
{
	size_t n;

	pthread_mutex_lock(&lock);
	n = nbytes;
	pthread_mutex_unlock(&lock);
	return n;
}

static _Atomic uint64_t service[SLUICE_ENVOY_SERVICE_COUNTS];

void sluice_envoy_count_service(sluice_envoy_service_count_t which)
{
	SLUICE_ASSERT(which < SLUICE_ENVOY_SERVICE_COUNTS);
	sluice_envoy_add(&service[which], 1);
}

/* The counters of a series, in the order of stats[] below. */
#define NSTATS 6
static void counters(sluice_envoy_series_t *s, _Atomic uint64_t *c[NSTATS])
{
	c[0] = &s->total_hits;
	c[1] = &s->over_limit;
	c[2] = &s->near_limit;
	c[3] = &s->within_limit;
	c[4] = &s->shadow_mode;
	c[5] = &s->domain_not_found;
}

/* envoyproxy/ratelimit's stat names, sluice's series and their help. */
static const struct {
	const char *stat; /* envoyproxy/ratelimit's */
	const char *name; /* sluice's */
	const char *help;
	int domain_level; /* counted on a domain's "" series */
} stats[NSTATS] = {
	{"total_hits", "sluice_envoy_total_hits_total",
	 "Hits (hits_addend) on an Envoy descriptor", 0},
	{"over_limit", "sluice_envoy_over_limit_total",
	 "Hits refused because a descriptor was over its limit", 0},
	{"near_limit", "sluice_envoy_near_limit_total",
	 "Hits allowed with less than 1 - near_limit_ratio of the bucket left",
	 0},
	{"within_limit", "sluice_envoy_within_limit_total",
	 "Hits allowed (within the limit)", 0},
	{"shadow_mode", "sluice_envoy_shadow_mode_total",
	 "Hits over the limit of a shadow_mode descriptor (allowed)", 0},
	{"domain_not_found", "sluice_envoy_domain_not_found_total",
	 "Descriptors of a domain no file defines", 1},
};

static const char *const service_stat[SLUICE_ENVOY_SERVICE_COUNTS] = {
	"ratelimit.service.global_shadow_mode",
	"ratelimit.service.call.should_rate_limit.redis_error",
	"ratelimit.service.call.should_rate_limit.service_error"};

static void render_sluice(sluice_buf_t *out, sluice_envoy_series_t *head)
{
	static const char *const errs[2] = {"store_error", "service_error"};
	sluice_envoy_series_t *s;
	_Atomic uint64_t *c[NSTATS];
	int k;

	for (k = 0; k < NSTATS && head; k++) {
		sluice_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n",
				  stats[k].name, stats[k].help, stats[k].name);
		for (s = head; s; s = s->all) {
			if ((*s->path == '\0') != stats[k].domain_level)
				continue;
			counters(s, c);
			sluice_buf_puts(out, stats[k].name);
			sluice_buf_puts(out, "{domain=\"");
			sluice_buf_label(out, s->domain);
			if (!stats[k].domain_level) {
				sluice_buf_puts(out, "\",descriptor=\"");
				sluice_buf_label(out, s->path);
			}
			sluice_buf_puts(out, "\"} ");
			sluice_buf_u64(out,
				       atomic_load_explicit(
					       c[k], memory_order_relaxed));
			sluice_buf_append(out, "\n", 1);
		}
	}
	sluice_buf_puts(out, "# HELP sluice_envoy_global_shadow_mode_total "
			     "Requests answered OK only because of "
			     "envoy.shadow_mode\n# TYPE "
			     "sluice_envoy_global_shadow_mode_total counter\n"
			     "sluice_envoy_global_shadow_mode_total ");
	sluice_buf_u64(out, atomic_load(&service[0]));
	sluice_buf_puts(out, "\n# HELP sluice_envoy_call_errors_total "
			     "ShouldRateLimit calls that failed, by type\n"
			     "# TYPE sluice_envoy_call_errors_total counter\n");
	for (k = 0; k < 2; k++) {
		sluice_buf_printf(
			out, "sluice_envoy_call_errors_total{type=\"%s\"} ",
			errs[k]);
		sluice_buf_u64(out, atomic_load(&service[k + 1]));
		sluice_buf_append(out, "\n", 1);
	}
}

/* ---------------------------------- envoyproxy/ratelimit's names */

/*
 * The mapping a statsd_exporter applies to envoyproxy/ratelimit's stats
 * by default (its README's mapper, also its built-in Prometheus sink's):
 * a `*` stands for one dot-free component.  A stat no row matches is
 * shown as statsd_exporter shows it: its name with every character but
 * [A-Za-z0-9_] made '_', no labels (a descriptor three levels deep:
 * ratelimit_service_rate_limit_DOMAIN_K1_K2_K3_total_hits).
 */
static const struct {
	const char *match;
	const char *name;
	const char *labels[3];
} mappings[] = {
	{"ratelimit.service.rate_limit.*.*.near_limit",
	 "ratelimit_service_rate_limit_near_limit",
	 {"domain", "key1"}},
	{"ratelimit.service.rate_limit.*.*.over_limit",
	 "ratelimit_service_rate_limit_over_limit",
	 {"domain", "key1"}},
	{"ratelimit.service.rate_limit.*.*.total_hits",
	 "ratelimit_service_rate_limit_total_hits",
	 {"domain", "key1"}},
	{"ratelimit.service.rate_limit.*.*.within_limit",
	 "ratelimit_service_rate_limit_within_limit",
	 {"domain", "key1"}},
	{"ratelimit.service.rate_limit.*.*.*.near_limit",
	 "ratelimit_service_rate_limit_near_limit",
	 {"domain", "key1", "key2"}},
	{"ratelimit.service.rate_limit.*.*.*.over_limit",
	 "ratelimit_service_rate_limit_over_limit",
	 {"domain", "key1", "key2"}},
	{"ratelimit.service.rate_limit.*.*.*.total_hits",
	 "ratelimit_service_rate_limit_total_hits",
	 {"domain", "key1", "key2"}},
	{"ratelimit.service.rate_limit.*.*.*.within_limit",
	 "ratelimit_service_rate_limit_within_limit",
	 {"domain", "key1", "key2"}},
	{"ratelimit.service.rate_limit.*.*.*.shadow_mode",
	 "ratelimit_service_rate_limit_shadow_mode",
	 {"domain", "key1", "key2"}},
	{"ratelimit.service.call.should_rate_limit.*",
	 "ratelimit_service_should_rate_limit_error",
	 {"err_type"}},
};
#define NMAPPINGS (sizeof(mappings) / sizeof(mappings[0]))
#define MAX_PARTS 8

/* Splits a statsd name at its dots (at most MAX_PARTS parts; more: -1). */
static int split(char *name, char *parts[MAX_PARTS])
{
	int n = 0;
	char *p = name;

	for (;;) {
		if (n == MAX_PARTS)
			return -1;
		parts[n++] = p;
		if (!(p = strchr(p, '.')))
			return n;
		*p++ = '\0';
	}
}

/* The row of mappings[] the name's parts match, its stars' parts in
 * star[]; -1 when none does. */
static int map(char *const parts[], int n, const char *star[3])
{
	size_t m;

	for (m = 0; m < NMAPPINGS; m++) {
		const char *g = mappings[m].match;
		int i, k = 0;

		for (i = 0; i < n && *g; i++) {
			size_t len = strcspn(g, ".");

			if (len == 1 && *g == '*')
				star[k++] = parts[i];
			else if (strlen(parts[i]) != len ||
				 strncmp(parts[i], g, len) != 0)
				break;
			g += len + (g[len] == '.');
		}
		if (i == n && !*g)
			return (int)m;
	}
	return -1;
}

/* One line to be: "name{labels}" and its count. */
typedef struct line_s {
	char *key;
	uint64_t v;
} line_t;

typedef struct lines_s {
	line_t *l;
	size_t n, cap;
	int oom;
} lines_t;

/* Adds the count of the statsd stat `statsd` under its mapped name. */
static void add_stat(lines_t *ls, const char *statsd, uint64_t v)
{
	char copy[3 * SLUICE_ENVOY_MAX_LABEL + 128], *parts[MAX_PARTS];
	const char *star[3] = {0};
	sluice_buf_t b = {0};
	int n, m = -1, i;
	const char *p;

	snprintf(copy, sizeof(copy), "%s", statsd);
	if ((n = split(copy, parts)) > 0)
		m = map(parts, n, star);
	if (m >= 0) {
		sluice_buf_puts(&b, mappings[m].name);
		for (i = 0; i < 3 && mappings[m].labels[i]; i++) {
			sluice_buf_printf(&b, "%c%s=\"", i ? ',' : '{',
					  mappings[m].labels[i]);
			sluice_buf_label(&b, star[i]);
			sluice_buf_append(&b, "\"", 1);
		}
		sluice_buf_append(&b, "}", 1);
	} else {
		for (p = statsd; *p; p++) {
			char ch = (*p >= 'a' && *p <= 'z') ||
						  (*p >= 'A' && *p <= 'Z') ||
						  (*p >= '0' && *p <= '9')
					  ? *p
					  : '_';

			sluice_buf_append(&b, &ch, 1);
		}
	}
	sluice_buf_append(&b, "", 1);
	if (!b.oom && !ls->oom && ls->n == ls->cap) {
		size_t cap = ls->cap ? ls->cap * 2 : 256;
		line_t *nl = realloc(ls->l, cap * sizeof(*nl));

		if (nl) {
			ls->l = nl;
			ls->cap = cap;
		} else {
			ls->oom = 1;
		}
	}
	if (b.oom || ls->oom) {
		/* Out of memory: the page goes without this line. */
		sluice_buf_free(&b);
		return;
	}
	ls->l[ls->n].key = b.data; /* the buffer's bytes, kept */
	ls->l[ls->n++].v = v;
}

static int cmp_line(const void *a, const void *b)
{
	return strcmp(((const line_t *)a)->key, ((const line_t *)b)->key);
}

/* The name of a line's family: its key up to '{'. */
static size_t family_len(const char *key)
{
	return strcspn(key, "{");
}

/*
 * Two stats may map to one series (the unmapped names of "a.b_c" and
 * "a_b.c" are one; a client's value under detailed_metric may aim at
 * that): lines are sorted and equal ones summed, so /metrics never holds
 * a series twice (a scraper would refuse the whole page), and each
 * family's lines are together under one TYPE line.
 */
static void emit(sluice_buf_t *out, lines_t *ls)
{
	size_t i, j;

	if (ls->n)
		qsort(ls->l, ls->n, sizeof(*ls->l), cmp_line);
	for (i = 0; i < ls->n; i = j) {
		uint64_t v = ls->l[i].v;
		size_t fl = family_len(ls->l[i].key);

		for (j = i + 1;
		     j < ls->n && !strcmp(ls->l[j].key, ls->l[i].key); j++)
			v = v > UINT64_MAX - ls->l[j].v ? UINT64_MAX
							: v + ls->l[j].v;
		if (i == 0 || family_len(ls->l[i - 1].key) != fl ||
		    strncmp(ls->l[i - 1].key, ls->l[i].key, fl) != 0)
			sluice_buf_printf(out, "# TYPE %.*s counter\n", (int)fl,
					  ls->l[i].key);
		sluice_buf_puts(out, ls->l[i].key);
		sluice_buf_append(out, " ", 1);
		sluice_buf_u64(out, v);
		sluice_buf_append(out, "\n", 1);
	}
	for (i = 0; i < ls->n; i++)
		free(ls->l[i].key);
	free(ls->l);
}

static void render_ratelimit(sluice_buf_t *out, sluice_envoy_series_t *head)
{
	char name[3 * SLUICE_ENVOY_MAX_LABEL + 128];
	lines_t ls = {0};
	sluice_envoy_series_t *s;
	_Atomic uint64_t *c[NSTATS];
	int k;

	for (s = head; s; s = s->all) {
		counters(s, c);
		for (k = 0; k < NSTATS; k++) {
			uint64_t v = atomic_load_explicit(c[k],
							  memory_order_relaxed);

			if ((*s->path == '\0') != stats[k].domain_level)
				continue;
			/* envoyproxy/ratelimit makes a series on first use:
			 * a domain-level one only when it counts. */
			if (stats[k].domain_level && !v)
				continue;
			if (stats[k].domain_level)
				snprintf(name, sizeof(name),
					 "ratelimit.service.rate_limit.%s.%s",
					 s->domain, stats[k].stat);
			else
				snprintf(
					name, sizeof(name),
					"ratelimit.service.rate_limit.%s.%s.%s",
					s->domain, s->path, stats[k].stat);
			add_stat(&ls, name, v);
		}
	}
	for (k = 0; k < SLUICE_ENVOY_SERVICE_COUNTS; k++)
		add_stat(&ls, service_stat[k], atomic_load(&service[k]));
	emit(out, &ls);
}

/* envoy.import_counters (import.c): shown once an import was
 * asked, in either style (envoyproxy/ratelimit has no such count). */
static _Atomic uint64_t imported_total;
static _Atomic int import_asked;

void sluice_envoy_count_import(int imported)
{
	atomic_store_explicit(&import_asked, 1, memory_order_relaxed);
	if (imported)
		sluice_envoy_add(&imported_total, 1);
}

static void render_import(sluice_buf_t *out)
{
	if (!atomic_load_explicit(&import_asked, memory_order_relaxed))
		return;
	sluice_buf_puts(out, "# HELP sluice_envoy_imported_total Buckets "
			     "started with envoyproxy/ratelimit's count "
			     "(envoy.import_counters)\n# TYPE "
			     "sluice_envoy_imported_total counter\n"
			     "sluice_envoy_imported_total ");
	sluice_buf_u64(out, atomic_load(&imported_total));
	sluice_buf_append(out, "\n", 1);
}

void sluice_envoy_metrics_render(sluice_buf_t *out, int style)
{
	sluice_envoy_series_t *head;

	/* Only the head is read under the lock: a series is never changed
	 * (but for its atomic counters) nor freed once it is on the list,
	 * and new ones go in front, so the walk needs no lock, and a
	 * scrape never holds up a decision that makes a series. */
	pthread_mutex_lock(&lock);
	head = all;
	pthread_mutex_unlock(&lock);
	if (style & SLUICE_ENVOY_METRICS_SLUICE)
		render_sluice(out, head);
	if (style & SLUICE_ENVOY_METRICS_RATELIMIT)
		render_ratelimit(out, head);
	render_import(out);
}

/* ------------------------------------------------------------- StatsD */

void sluice_envoy_stats_delta(sluice_envoy_stat_cb cb, void *arg)
{
	static uint64_t service_sent[SLUICE_ENVOY_SERVICE_COUNTS];
	char name[3 * SLUICE_ENVOY_MAX_LABEL + 128];
	sluice_envoy_series_t *s, *head;
	_Atomic uint64_t *c[NSTATS];
	uint64_t v;
	int k;

	pthread_mutex_lock(&lock);
	head = all;
	pthread_mutex_unlock(&lock);
	for (s = head; s; s = s->all) {
		counters(s, c);
		for (k = 0; k < NSTATS; k++) {
			if ((*s->path == '\0') != stats[k].domain_level)
				continue;
			v = atomic_load_explicit(c[k], memory_order_relaxed);
			if (v == s->sent[k])
				continue;
			if (stats[k].domain_level)
				snprintf(name, sizeof(name),
					 "ratelimit.service.rate_limit.%s.%s",
					 s->domain, stats[k].stat);
			else
				snprintf(
					name, sizeof(name),
					"ratelimit.service.rate_limit.%s.%s.%s",
					s->domain, s->path, stats[k].stat);
			cb(arg, name, v - s->sent[k]);
			s->sent[k] = v;
		}
	}
	for (k = 0; k < SLUICE_ENVOY_SERVICE_COUNTS; k++) {
		v = atomic_load(&service[k]);
		if (v != service_sent[k])
			cb(arg, service_stat[k], v - service_sent[k]);
		service_sent[k] = v;
	}
}
