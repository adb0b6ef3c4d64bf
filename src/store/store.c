/*
 * store.c -- the store drivers' registry: opening the configured store,
 * one case per driver, for every host (`sluice serve`'s threads, the
 * simulator, the Node addon's Limiters).  The drivers themselves:
 * store_local.c (memory, shared memory), store_redis.c (Redis); what they
 * say to their host goes through store_hooks.c or the events the host
 * gave at open.
 */
#include "store/store.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- kinds */

#define SLUICE_KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

static const sluice_store_kind_info_t kinds[] = {
#define SLUICE_STORE_KIND(id, name, log, sentinel_log, keys, node_keys)        \
	{SLUICE_STORE_##id, name, log, sentinel_log, SLUICE_KEYS keys},
#include "store/store_kinds.def"
#undef SLUICE_STORE_KIND
};

#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static const char *const kind_names[] = {
#define SLUICE_STORE_KIND(id, name, ...) name,
#include "store/store_kinds.def"
#undef SLUICE_STORE_KIND
	NULL};

const sluice_store_kind_info_t *sluice_store_kind_info(sluice_store_kind_t kind)
{
	/* The enum is the rows' order (store_config.h). */
	return (size_t)kind < NKINDS ? &kinds[kind] : NULL;
}

const sluice_store_kind_info_t *sluice_store_kind_named(const char *name)
{
	size_t i;

	for (i = 0; i < NKINDS; i++)
		if (strcmp(kinds[i].name, name) == 0)
			return &kinds[i];
	return NULL;
}

const char *const *sluice_store_kind_names(void)
{
	return kind_names;
}

/* ------------------------------------------------------------ lifecycle */

void sluice_backend_memory(sluice_backend_t *be, sluice_memstore_t *store)
{
	memset(be, 0, sizeof(*be));
	be->ops = &sluice_memory_store_ops;
	be->impl = store;
	be->local = store;
}

int sluice_backend_open_events(sluice_backend_t *be,
			       const sluice_store_config_t *store, void *loop,
			       sluice_memstore_t *shared,
			       sluice_shmstore_t *shm,
			       const sluice_store_events_t *events, char *err,
			       size_t errlen)
{
	int rc;

	memset(be, 0, sizeof(*be));
	be->local = shared;
	switch (store->kind) {
	case SLUICE_STORE_MEMORY:
		if (shared) {
			sluice_backend_memory(be, shared);
			return 0;
		}
		/* No process-wide store given: one of the backend's own. */
		rc = sluice_memstore_open(&shared, store->max_keys, err,
					  errlen);
		if (rc < 0)
			return rc;
		sluice_backend_memory(be, shared);
		be->ops = &sluice_memory_owned_ops;
		return 0;
	case SLUICE_STORE_SHARED:
		be->ops = &sluice_shm_store_ops;
		be->impl = shm;
		if (shm)
			return 0;
		/* As the memory store: the backend's own. */
		rc = sluice_shmstore_open_group(&shm, store->shm_path,
						store->max_keys,
						store->shm_group, err, errlen);
		if (rc < 0) {
			memset(be, 0, sizeof(*be));
			return rc;
		}
		be->ops = &sluice_shm_owned_ops;
		be->impl = shm;
		return 0;
	case SLUICE_STORE_REDIS:
	case SLUICE_STORE_REDIS_CLUSTER:
		rc = sluice_redis_store_open(&be->impl, store, loop, events,
					     err, errlen);
		if (rc < 0)
			return rc;
		be->ops = &sluice_redis_store_ops;
		return 0;
	default:
		snprintf(err, errlen, "store: unknown kind %d",
			 (int)store->kind);
		return SLUICE_EINVAL;
	}
}

int sluice_backend_open_loop(sluice_backend_t *be,
			     const sluice_store_config_t *store,
			     sluice_loop_t *loop,
			     const sluice_store_events_t *events, char *err,
			     size_t errlen)
{
	int rc;

	if (store->kind != SLUICE_STORE_REDIS &&
	    store->kind != SLUICE_STORE_REDIS_CLUSTER)
		return sluice_backend_open_events(be, store, NULL, NULL, NULL,
						  events, err, errlen);
	memset(be, 0, sizeof(*be));
	rc = sluice_redis_store_open_loop(&be->impl, store, loop, events, err,
					  errlen);
	if (rc < 0)
		return rc;
	be->ops = &sluice_redis_store_ops;
	return 0;
}

int sluice_backend_open(sluice_backend_t *be,
			const sluice_store_config_t *store, void *loop,
			sluice_memstore_t *shared, sluice_shmstore_t *shm,
			char *err, size_t errlen)
{
	return sluice_backend_open_events(be, store, loop, shared, shm, NULL,
					  err, errlen);
}

void sluice_backend_close_then(sluice_backend_t *be, void (*done)(void *arg),
			       void *arg)
{
	const sluice_store_ops_t *ops = be->ops;
	void *impl = be->impl;

	be->ops = NULL;
	be->impl = NULL;
	if (ops && ops->free_then && done) {
		ops->free_then(impl, done, arg);
		return;
	}
	if (ops && ops->free)
		ops->free(impl);
	if (done)
		done(arg);
}

void sluice_backend_close(sluice_backend_t *be)
{
	sluice_backend_close_then(be, NULL, NULL);
}

int sluice_backend_healthy(sluice_backend_t *be)
{
	return be->ops && (!be->ops->healthy || be->ops->healthy(be->impl));
}
