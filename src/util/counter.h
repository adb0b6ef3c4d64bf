/*
 * counter.h -- a counter with one writer and any number of readers: the
 * writer counts with a relaxed load and store (no locked instruction),
 * readers (a /metrics scrape on another thread) load it relaxed.
 */
#ifndef SLUICE_UTIL_COUNTER_H
#define SLUICE_UTIL_COUNTER_H

#include <stdatomic.h>
#include <stdint.h>

typedef _Atomic uint64_t sluice_counter_t;

/* Single-writer increment. */
static inline void sluice_count(sluice_counter_t *c, uint64_t n)
{
	atomic_store_explicit(c,
			      atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

#endif /* SLUICE_UTIL_COUNTER_H */
