/*
 * store_local.c -- opening the configured store, and the drivers of the
 * stores in this process's memory: the memory store and the host's
 * shared-memory store.
 */
#include "store/shm.h"
#include "store/store.h"

#include <stdio.h>
#include <string.h>

/* ----------------------------------------------------------------- hooks */

static const sluice_store_hooks_t no_hooks;
static const sluice_store_hooks_t *hooks = &no_hooks;

void sluice_store_set_hooks(const sluice_store_hooks_t *h)
{
	hooks = h ? h : &no_hooks;
}

const sluice_store_hooks_t *sluice_store_hooks(void)
{
	return hooks;
}

static void say_error(const char *msg)
{
	if (hooks->log_error)
		hooks->log_error(msg);
}

/* ---------------------------------------------------------- memory store */

static int memory_take(void *impl, sluice_take_item_t *items, size_t n,
		       int64_t now_us, sluice_store_cb cb, void *arg)
{
	int r;

	if (n == 1) {
		/* One key (the common case): the single-key take, the same
		 * decision with less bookkeeping. */
		r = sluice_memstore_take(impl, items->key, items->keylen,
					 items->limits, items->nlimits,
					 items->cost, now_us, NULL,
					 &items->summary);
		if (r >= 0)
			items->allowed = r;
	} else {
		r = sluice_memstore_take_many(impl, items, n, now_us);
	}
	if (r == SLUICE_EINVAL)
		return r;
	cb(arg, r < 0 ? r : 0, r > 0);
	return 0;
}

/* Resets or refunds each item in turn on a store that answers at once;
 * `one` does one item on the store `impl`. */
static int
each_item(void *impl, sluice_take_item_t *items, size_t n, int64_t now_us,
	  int (*one)(void *impl, const sluice_take_item_t *it, int64_t now_us),
	  sluice_store_cb cb, void *arg)
{
	size_t i;
	int r;

	for (i = 0; i < n; i++)
		if ((r = one(impl, &items[i], now_us)) < 0)
			return r;
	cb(arg, 0, 1);
	return 0;
}

static int memory_reset_one(void *impl, const sluice_take_item_t *it,
			    int64_t now_us)
{
	return sluice_memstore_reset(impl, it->key, it->keylen, it->limits,
				     it->nlimits);
}

static int memory_refund_one(void *impl, const sluice_take_item_t *it,
			     int64_t now_us)
{
	return sluice_memstore_refund(impl, it->key, it->keylen, it->limits,
				      it->nlimits, it->cost, now_us);
}

static int memory_reset(void *impl, sluice_take_item_t *items, size_t n,
			sluice_store_cb cb, void *arg)
{
	return each_item(impl, items, n, 0, memory_reset_one, cb, arg);
}

static int memory_refund(void *impl, sluice_take_item_t *items, size_t n,
			 int64_t now_us, sluice_store_cb cb, void *arg)
{
	return each_item(impl, items, n, now_us, memory_refund_one, cb, arg);
}

static void memory_stats(void *impl, sluice_memstore_stats_t *out)
{
	sluice_memstore_stats(impl, out);
}

static void memory_free(void *impl)
{
	/* The store is shared by every thread and outlives configs. */
}

const sluice_store_ops_t sluice_memory_store_ops = {
	.name = "memory",
	.take = memory_take,
	.reset = memory_reset,
	.refund = memory_refund,
	.healthy = NULL,
	.stats = memory_stats,
	.free = memory_free,
};

/* -------------------------------------------------- shared-memory store */

/* A failing shared store is said in the log: once when the file shrank
 * under the mapping (every call fails from then on), and once for a lock
 * held too long (which may pass); the metrics count every failure. */
static void shm_log_failure(sluice_shmstore_t *shm)
{
	static int said_shrunk, said_lock;

	if (sluice_shmstore__failed(shm)) {
		if (!__atomic_exchange_n(&said_shrunk, 1, __ATOMIC_RELAXED))
			say_error("store.shared: the file shrank under its "
				  "mapping (truncated, or its tmpfs is full); "
				  "every decision now follows on_store_error "
				  "until a restart, which refuses the damaged "
				  "file");
	} else if (!__atomic_exchange_n(&said_lock, 1, __ATOMIC_RELAXED)) {
		say_error("store.shared: a shard's lock was not "
			  "released within 10 s (a stopped process, or "
			  "a damaged file); such decisions follow "
			  "on_store_error");
	}
}

/* As the memory driver, on the host's shared store (which a process
 * opened once: it outlives configs too). */
static int shm_take(void *impl, sluice_take_item_t *items, size_t n,
		    int64_t now_us, sluice_store_cb cb, void *arg)
{
	int r;

	if (n == 1) {
		r = sluice_shmstore_take(impl, items->key, items->keylen,
					 items->limits, items->nlimits,
					 items->cost, now_us, NULL,
					 &items->summary);
		if (r >= 0)
			items->allowed = r;
	} else {
		r = sluice_shmstore_take_many(impl, items, n, now_us);
	}
	if (r == SLUICE_EINVAL)
		return r;
	if (r == SLUICE_ESTORE)
		shm_log_failure(impl);
	cb(arg, r < 0 ? r : 0, r > 0);
	return 0;
}

static int shm_reset_one(void *impl, const sluice_take_item_t *it,
			 int64_t now_us)
{
	return sluice_shmstore_reset(impl, it->key, it->keylen, it->limits,
				     it->nlimits);
}

static int shm_refund_one(void *impl, const sluice_take_item_t *it,
			  int64_t now_us)
{
	return sluice_shmstore_refund(impl, it->key, it->keylen, it->limits,
				      it->nlimits, it->cost, now_us);
}

static int shm_reset(void *impl, sluice_take_item_t *items, size_t n,
		     sluice_store_cb cb, void *arg)
{
	return each_item(impl, items, n, 0, shm_reset_one, cb, arg);
}

static int shm_refund(void *impl, sluice_take_item_t *items, size_t n,
		      int64_t now_us, sluice_store_cb cb, void *arg)
{
	return each_item(impl, items, n, now_us, shm_refund_one, cb, arg);
}

static void shm_stats(void *impl, sluice_memstore_stats_t *out)
{
	sluice_shmstore_stats(impl, out);
}

const sluice_store_ops_t sluice_shm_store_ops = {
	.name = "shared",
	.take = shm_take,
	.reset = shm_reset,
	.refund = shm_refund,
	.healthy = NULL,
	.stats = shm_stats,
	.free = memory_free,
};

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
