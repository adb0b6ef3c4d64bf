/*
 * stores.h -- stores for the unit tests: a memory store opened with
 * sluice_memstore_open(), or NULL (with the reason on stderr) for the
 * test's own CHECK to catch; a limit from its capacity and rate, and
 * whether two decisions agree.
 */
#ifndef SLUICE_TEST_STORES_H
#define SLUICE_TEST_STORES_H

#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>

static inline sluice_memstore_t *open_memstore(size_t max_keys)
{
	sluice_memstore_t *m;
	char err[160];

	if (sluice_memstore_open(&m, max_keys, err, sizeof(err)) != 0)
		fprintf(stderr, "open_memstore(%zu): %s\n", max_keys, err);
	return m;
}

/* A limit of `capacity` refilled at `rate` ("2/s"); aborts if invalid. */
static inline sluice_limit_t lim(uint64_t capacity, const char *rate)
{
	sluice_limit_t l;

	if (sluice_limit_parse(&l, "1", rate, NULL, 0) < 0 ||
	    sluice_limit_init(&l, capacity, &l.rate, NULL, 0) < 0)
		abort();
	return l;
}

/* 1 when two decisions agree in every field. */
static inline int same_decision(const sluice_decision_t *a,
				const sluice_decision_t *b)
{
	return a->allowed == b->allowed && a->limit == b->limit &&
	       a->remaining == b->remaining && a->never == b->never &&
	       a->retry_after_us == b->retry_after_us &&
	       a->reset_after_us == b->reset_after_us && a->which == b->which;
}

#endif /* SLUICE_TEST_STORES_H */
