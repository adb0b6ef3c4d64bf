/*
 * counters.c -- the registry of per-thread counter blocks and rule slots.
 */
#include "policy/counters.h"
#include "util/registry.h"

/* Slot 0 is the ad-hoc limits' (SLUICE_METRIC_ADHOC), registered first. */
static char *slot_names[SLUICE_METRIC_SLOTS];
static sluice_registry_t reg =
	SLUICE_REGISTRY_INIT(sluice_metrics_t, next, slot_names);

const uint64_t sluice_latency_bucket_ns[SLUICE_LATENCY_BUCKETS] = {
	25000,	 50000,	   100000,   250000,   500000,	  1000000,   2500000,
	5000000, 10000000, 25000000, 50000000, 100000000, 1000000000};

void sluice_latency_count(sluice_counter_t *hist, sluice_counter_t *sum,
			  uint64_t ns)
{
	sluice_histogram_count(sluice_latency_bucket_ns, SLUICE_LATENCY_BUCKETS,
			       hist, sum, ns);
}

sluice_metrics_t *sluice_metrics_new(void)
{
	return sluice_registry_new(&reg, sizeof(sluice_metrics_t));
}

uint16_t sluice_metrics_slot(const char *name)
{
	/* Registering is idempotent: two threads racing here both find
	 * "adhoc" at slot 0. */
	sluice_registry_slot(&reg, "adhoc");
	return (uint16_t)sluice_registry_slot(&reg, name);
}

void sluice_metrics_visit(void (*fn)(void *arg, const sluice_metrics_t *all,
				     const char *const *names, size_t n),
			  void *arg)
{
	pthread_mutex_lock(&reg.lock);
	fn(arg, reg.blocks, (const char *const *)slot_names, reg.n);
	pthread_mutex_unlock(&reg.lock);
}
