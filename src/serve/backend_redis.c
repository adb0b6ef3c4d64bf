/*
 * backend_redis.c -- the Redis store as a serve store driver: one client
 * (include/sluice_redis.h) per event-loop thread, opened on that thread's
 * loop, so threads share nothing but the Redis server.  Its calls already
 * have the driver's shape; on_store_error is applied by verdict.c.
 */
#include "serve/backend.h"
#include "serve/log.h"
#include "serve/metrics_redis.h"
#include "sluice_redis.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ store health log */

/* Each thread's client reports its own nodes' changes; the log says each
 * change once for the process, so N threads watching one refused password
 * write one line, not N.  Keyed by node: the last connection state and
 * breaker state written. */
#define LOG_NODES 64

static struct {
	char node[80];
	int state;   /* last CONNECTED/AUTH_FAILED/UNREACHABLE/TIMEOUT */
	int breaker; /* last BREAKER_OPEN/CLOSED */
} log_nodes[LOG_NODES];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* 1 when the event changes what the log last said about its node. */
static int log_is_news(const sluice_redis_event_t *ev)
{
	int kind = (int)ev->kind, *slot = NULL, news = 1;
	size_t i;

	if (kind == SLUICE_REDIS_EV_SCRIPT_RELOADED ||
	    kind == SLUICE_REDIS_EV_SLOTS_CHANGED)
		return 1; /* events, already throttled by the client */
	pthread_mutex_lock(&log_lock);
	for (i = 0; i < LOG_NODES; i++) {
		if (!log_nodes[i].node[0])
			snprintf(log_nodes[i].node, sizeof(log_nodes[i].node),
				 "%s", ev->node);
		if (strncmp(log_nodes[i].node, ev->node,
			    sizeof(log_nodes[i].node) - 1) == 0)
			break;
	}
	if (i < LOG_NODES) {
		slot = kind == SLUICE_REDIS_EV_BREAKER_OPEN ||
				       kind == SLUICE_REDIS_EV_BREAKER_CLOSED
			       ? &log_nodes[i].breaker
			       : &log_nodes[i].state;
		news = *slot != kind;
		*slot = kind;
	}
	pthread_mutex_unlock(&log_lock);
	return news;
}

static void on_store_event(void *arg, const sluice_redis_event_t *ev)
{
	const char *name = sluice_redis_event_name(ev->kind);

	(void)arg;
	if (!log_is_news(ev))
		return;
	switch (ev->kind) {
	case SLUICE_REDIS_EV_CONNECTED:
	case SLUICE_REDIS_EV_BREAKER_CLOSED:
	case SLUICE_REDIS_EV_SLOTS_CHANGED:
	case SLUICE_REDIS_EV_SCRIPT_RELOADED:
		sluice_log_info("redis %s: %s%s%s", ev->node, name,
				ev->detail[0] ? ": " : "", ev->detail);
		break;
	case SLUICE_REDIS_EV_AUTH_FAILED:
		sluice_log_error("redis %s: %s: the server said \"%s\"",
				 ev->node, name, ev->detail);
		break;
	default:
		sluice_log_warn("redis %s: %s%s%s", ev->node, name,
				ev->detail[0] ? ": " : "", ev->detail);
		break;
	}
}

/* ---------------------------------------------------------------- driver */

/* The driver's instance: the client and the block its reports count in. */
typedef struct {
	sluice_redis_t *r;
	sluice_redis_metrics_t *metrics;
} redis_impl_t;

static int redis_take(void *impl, sluice_take_item_t *items, size_t n,
		      int64_t now_us, sluice_store_cb cb, void *arg)
{
	/* Redis decides on its own clock: now_us is not needed. */
	return sluice_redis_take_many(((redis_impl_t *)impl)->r, items, n, cb,
				      arg);
}

static int redis_reset(void *impl, sluice_take_item_t *items, size_t n,
		       sluice_store_cb cb, void *arg)
{
	return sluice_redis_reset(((redis_impl_t *)impl)->r, items, n, cb, arg);
}

static int redis_refund(void *impl, sluice_take_item_t *items, size_t n,
			int64_t now_us, sluice_store_cb cb, void *arg)
{
	return sluice_redis_refund(((redis_impl_t *)impl)->r, items, n, cb,
				   arg);
}

static int redis_healthy(void *impl)
{
	return sluice_redis_healthy(((redis_impl_t *)impl)->r);
}

static void redis_free(void *impl)
{
	/* Pending calls fail with SLUICE_ESTORE; the loop then closes the
	 * client's handles (server.c runs it after closing the backend). */
	redis_impl_t *d = impl;

	sluice_redis_metrics_retire(d->metrics);
	sluice_redis_free(d->r);
	free(d);
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
	redis_impl_t *d = calloc(1, sizeof(*d));
	int rc;

	if (!d) {
		snprintf(err, errlen, "redis store: out of memory");
		return SLUICE_ENOMEM;
	}
	/* NULL (out of memory) only loses the node metrics. */
	d->metrics = sluice_redis_metrics_new();
	if (store->kind == SLUICE_STORE_REDIS_CLUSTER) {
		o.seeds = (const char *const *)store->seeds;
		o.nseeds = store->nseeds;
	} else {
		o.url = store->url ? store->url : "redis://127.0.0.1:6379";
	}
	o.key_prefix = store->key_prefix;
	o.timeout_ms = store->timeout_ms;
	o.connections = store->connections;
	o.on_event = on_store_event;
	o.on_report = sluice_redis_metrics_report;
	o.event_arg = d->metrics;
	rc = sluice_redis_new(loop, &o, &d->r, err, errlen);
	if (rc < 0) {
		sluice_redis_metrics_retire(d->metrics);
		free(d);
		return rc;
	}
	*impl = d;
	return 0;
}
