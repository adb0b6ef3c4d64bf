/*
 * counters.c -- the registry of per-thread counter blocks and rule slots.
 */
#include "policy/counters.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static sluice_metrics_t *all;
static char *slot_names[SLUICE_METRIC_SLOTS];
static atomic_size_t nslots;

const uint64_t sluice_latency_bucket_ns[SLUICE_LATENCY_BUCKETS] = {
	25000,	 50000,	   100000,   250000,   500000,	  1000000,   2500000,
	5000000, 10000000, 25000000, 50000000, 100000000, 1000000000};

void sluice_latency_count(sluice_counter_t *hist, sluice_counter_t *sum,
			  uint64_t ns)
{
	size_t i;

	for (i = 0;
	     i < SLUICE_LATENCY_BUCKETS && ns > sluice_latency_bucket_ns[i];
	     i++)
		;
	sluice_count(&hist[i], 1);
	sluice_count(sum, ns);
}

sluice_metrics_t *sluice_metrics_new(void)
{
	sluice_metrics_t *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	pthread_mutex_lock(&lock);
	m->next = all;
	all = m;
	pthread_mutex_unlock(&lock);
	return m;
}

uint16_t sluice_metrics_slot(const char *name)
{
	size_t i, n;
	uint16_t slot;

	pthread_mutex_lock(&lock);
	if (!slot_names[SLUICE_METRIC_ADHOC]) {
		slot_names[SLUICE_METRIC_ADHOC] = strdup("adhoc");
		atomic_store(&nslots, 1);
	}
	n = atomic_load(&nslots);
	for (i = 0; i < n; i++)
		if (slot_names[i] && strcmp(slot_names[i], name) == 0)
			break;
	if (i == n && n < SLUICE_METRIC_SLOTS) {
		slot_names[n] = strdup(name);
		atomic_store(&nslots, n + 1);
	}
	slot = (uint16_t)(i < SLUICE_METRIC_SLOTS ? i
						  : SLUICE_METRIC_SLOTS - 1);
	pthread_mutex_unlock(&lock);
	return slot;
}

void sluice_metrics_visit(void (*fn)(void *arg, const sluice_metrics_t *all,
				     const char *const *names, size_t n),
			  void *arg)
{
	pthread_mutex_lock(&lock);
	fn(arg, all, (const char *const *)slot_names, atomic_load(&nslots));
	pthread_mutex_unlock(&lock);
}
