/*
 * backend_redis.c -- the Redis store as a serve store driver: one client
 * (include/sluice_redis.h) per event-loop thread, opened on that thread's
 * loop, so threads share nothing but the Redis server.  Its calls already
 * have the driver's shape; on_store_error is applied by verdict.c.
 */
#include "serve/backend.h"
#include "sluice_redis.h"

#include <stdio.h>

static int redis_take(void *impl, sluice_take_item_t *items, size_t n,
		      int64_t now_us, sluice_store_cb cb, void *arg)
{
	/* Redis decides on its own clock: now_us is not needed. */
	return sluice_redis_take_many(impl, items, n, cb, arg);
}

static int redis_reset(void *impl, sluice_take_item_t *items, size_t n,
		       sluice_store_cb cb, void *arg)
{
	return sluice_redis_reset(impl, items, n, cb, arg);
}

static int redis_refund(void *impl, sluice_take_item_t *items, size_t n,
			int64_t now_us, sluice_store_cb cb, void *arg)
{
	return sluice_redis_refund(impl, items, n, cb, arg);
}

static int redis_healthy(void *impl)
{
	return sluice_redis_healthy(impl);
}

static void redis_free(void *impl)
{
	/* Pending calls fail with SLUICE_ESTORE; the loop then closes the
	 * client's handles (server.c runs it after closing the backend). */
	sluice_redis_free(impl);
}

const sluice_store_ops_t sluice_redis_store_ops = {
	.name = "redis",
	.take = redis_take,
	.reset = redis_reset,
	.refund = redis_refund,
	.healthy = redis_healthy,
	.stats = NULL,
	.free = redis_free,
};

int sluice_redis_store_open(void **impl, const sluice_store_config_t *store,
			    void *loop, char *err, size_t errlen)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	int rc;

	if (store->kind == SLUICE_STORE_REDIS_CLUSTER) {
		o.seeds = (const char *const *)store->seeds;
		o.nseeds = store->nseeds;
	} else {
		o.url = store->url ? store->url : "redis://127.0.0.1:6379";
	}
	o.key_prefix = store->key_prefix;
	o.timeout_ms = store->timeout_ms;
	o.connections = store->connections;
	rc = sluice_redis_new(loop, &o, &r, err, errlen);
	if (rc < 0)
		return rc;
	*impl = r;
	return 0;
}
