/*
 * store.c -- the store drivers' registry: opening the configured store,
 * one case per driver.  The drivers themselves: store_local.c (memory,
 * shared memory), store_redis.c (Redis); what they say to their host goes
 * through store_hooks.c.
 */
#include "store/store.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ lifecycle */

void sluice_backend_memory(sluice_backend_t *be, sluice_memstore_t *store)
{
	memset(be, 0, sizeof(*be));
	be->ops = &sluice_memory_store_ops;
	be->impl = store;
	be->local = store;
}

int sluice_backend_open(sluice_backend_t *be,
			const sluice_store_config_t *store, void *loop,
			sluice_memstore_t *shared, sluice_shmstore_t *shm,
			char *err, size_t errlen)
{
	memset(be, 0, sizeof(*be));
	be->local = shared;
	switch (store->kind) {
	case SLUICE_STORE_MEMORY:
		sluice_backend_memory(be, shared);
		return 0;
	case SLUICE_STORE_SHARED:
		if (!shm) {
			snprintf(err, errlen,
				 "store: the shared store is not "
				 "open");
			return SLUICE_EINVAL;
		}
		be->ops = &sluice_shm_store_ops;
		be->impl = shm;
		return 0;
	case SLUICE_STORE_REDIS:
	case SLUICE_STORE_REDIS_CLUSTER:
		if (sluice_redis_store_open(&be->impl, store, loop, err,
					    errlen) < 0)
			return SLUICE_EINVAL;
		be->ops = &sluice_redis_store_ops;
		return 0;
	default:
		snprintf(err, errlen, "store: unknown kind %d",
			 (int)store->kind);
		return SLUICE_EINVAL;
	}
}

void sluice_backend_close(sluice_backend_t *be)
{
	if (be->ops && be->ops->free)
		be->ops->free(be->impl);
	be->ops = NULL;
	be->impl = NULL;
}

int sluice_backend_healthy(sluice_backend_t *be)
{
	return be->ops && (!be->ops->healthy || be->ops->healthy(be->impl));
}
