/*
 * envoy_metrics.c -- the registry of Envoy descriptor series (see
 * envoy_metrics.h).
 */
#include "policy/envoy_metrics.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 1024

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static sluice_envoy_series_t *table[NBUCKETS];
static sluice_envoy_series_t *all;
static size_t nseries;
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
	return s;
}

sluice_envoy_series_t *sluice_envoy_series(const char *domain, const char *path)
{
	sluice_envoy_series_t *s;

	pthread_mutex_lock(&lock);
	s = get(domain, path, nseries < SLUICE_ENVOY_MAX_SERIES);
	if (!s)
		s = get(domain, "_overflow", 1);
	pthread_mutex_unlock(&lock);
	return s ? s : &lost;
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
	sluice_envoy_series_t *s;
	int k;

	pthread_mutex_lock(&lock);
	for (k = 0; k < 4 && all; k++) {
		sluice_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n",
				  names[k], help[k], names[k]);
		for (s = all; s; s = s->all) {
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
	pthread_mutex_unlock(&lock);
}
