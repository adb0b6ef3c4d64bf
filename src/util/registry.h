/*
 * registry.h -- the process-wide registry of per-thread counter blocks
 * and of the names their slots count under, as /metrics reads them.
 *
 * A thread allocates its block once (sluice_registry_new()) and counts
 * into it with no lock (util/counter.h); a scrape on another thread walks
 * every block, newest first through the block's own `next` pointer,
 * holding the registry's lock.  Blocks are never freed: a scrape may read
 * one at any time.  A name (a rule, a Redis node) is registered once and
 * keeps its slot number for the life of the process, the same in every
 * thread's block.  The policy engine's counters (policy/counters.c) and
 * the Redis store's per-node metrics (store/store_redis_metrics.c) are
 * two registries.
 */
#ifndef SLUICE_UTIL_REGISTRY_H
#define SLUICE_UTIL_REGISTRY_H

#include "util/counter.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sluice_registry_s {
	pthread_mutex_t lock; /* held by a scrape, and to register */
	void *blocks;	      /* the newest block, NULL before the first */
	size_t next_at;	      /* offsetof(block type, its next pointer) */
	char **names;	      /* the names registered, names[0..n) */
	size_t cap;	      /* names' length: the last slot is shared */
	size_t n;
} sluice_registry_t;

/* A registry of blocks of `type` linked through its `member`, naming
 * slots in `names` (an array of char *, all NULL). */
#define SLUICE_REGISTRY_INIT(type, member, names)                              \
	{                                                                      \
		PTHREAD_MUTEX_INITIALIZER, NULL, offsetof(type, member),       \
			names, sizeof(names) / sizeof((names)[0]), 0           \
	}

/* A zeroed block of size bytes, registered (NULL when memory is short). */
void *sluice_registry_new(sluice_registry_t *r, size_t size);

/* The slot of `name`, registered on first use (thread-safe).  When every
 * slot is taken (or memory is short), the last slot, cap - 1, which names
 * and others then share. */
size_t sluice_registry_slot(sluice_registry_t *r, const char *name);

/* Counts ns in a histogram of nbounds + 1 buckets (bounds ascending, in
 * ns; the last bucket is everything above) and its sum. */
static inline void sluice_histogram_count(const uint64_t *bounds,
					  size_t nbounds,
					  sluice_counter_t *hist,
					  sluice_counter_t *sum, uint64_t ns)
{
	size_t i;

	for (i = 0; i < nbounds && ns > bounds[i]; i++)
		;
	sluice_count(&hist[i], 1);
	sluice_count(sum, ns);
}

#endif /* SLUICE_UTIL_REGISTRY_H */
