/*
 * stores.h -- stores for the unit tests: a memory store opened with
 * sluice_memstore_open(), or NULL (with the reason on stderr) for the
 * test's own CHECK to catch.
 */
#ifndef SLUICE_TEST_STORES_H
#define SLUICE_TEST_STORES_H

#include "sluice.h"

#include <stdio.h>

static inline sluice_memstore_t *open_memstore(size_t max_keys)
{
	sluice_memstore_t *m;
	char err[160];

	if (sluice_memstore_open(&m, max_keys, err, sizeof(err)) != 0)
		fprintf(stderr, "open_memstore(%zu): %s\n", max_keys, err);
	return m;
}

#endif /* SLUICE_TEST_STORES_H */
