/*
 * envoy_metrics.c -- the registry of Envoy descriptor series (see
 * envoy_metrics.h).
 */
#include "policy/envoy_metrics.h"

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

void sluice_envoy_metrics_render(sluice_buf_t *out)
{
	static const char *const names[4] = {"sluice_envoy_total_hits_total",
					     "sluice_envoy_over_limit_total",
					     "sluice_envoy_near_limit_total",
					     "sluice_envoy_shadow_mode_total"};
	static const char *const help[4] = {
		"Hits (hits_addend) on an Envoy descriptor",
		"Hits refused because a descriptor was over its limit",
		("Hits allowed with less than 1 - near_limit_ratio of the "
		 "bucket left"),
		"Hits over the limit of a shadow_mode descriptor (allowed)"};
	sluice_envoy_series_t *s, *head;
	int k;

	/* Only the head is read under the lock: a series is never changed
	 * (but for its atomic counters) nor freed once it is on the list,
	 * and new ones go in front, so the walk needs no lock, and a
	 * scrape never holds up a decision that makes a series. */
	pthread_mutex_lock(&lock);
	head = all;
	pthread_mutex_unlock(&lock);
	for (k = 0; k < 4 && head; k++) {
		sluice_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n",
				  names[k], help[k], names[k]);
		for (s = head; s; s = s->all) {
			_Atomic uint64_t *c[4] = {
				&s->total_hits, &s->over_limit, &s->near_limit,
				&s->shadow_mode};

			sluice_buf_puts(out, names[k]);
			sluice_buf_puts(out, "{domain=\"");
			sluice_buf_label(out, s->domain);
			sluice_buf_puts(out, "\",descriptor=\"");
			sluice_buf_label(out, s->path);
			sluice_buf_puts(out, "\"} ");
			sluice_buf_u64(out,
				       atomic_load_explicit(
					       c[k], memory_order_relaxed));
			sluice_buf_append(out, "\n", 1);
		}
	}
}
