/*
 * store_redis.c -- the Redis store as a store driver: one client
 * (include/sluice_redis.h) per event-loop thread, opened on that thread's
 * loop, so threads share nothing but the Redis server.  Its calls already
 * have the driver's shape; on_store_error is applied by the verdict engine.
 * What the client reports goes to the events the backend was opened
 * with, else to the host's hooks (store.h).
 */
#include "store/store.h"
#include "util/defaults.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- driver */

/* The driver's instance: the client and the hooks' arg for its reports
 * (the block they count in; attached: the hooks' attach gave it, and
 * their detach takes it back). */
typedef struct {
	sluice_redis_t *r;
	void *hook_arg;
	int attached;
} redis_impl_t;

static void detach(redis_impl_t *d)
{
	const sluice_store_hooks_t *h = sluice_store_hooks();

	if (d->attached && h->detach)
		h->detach(d->hook_arg);
}

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

static int redis_penalize(void *impl, sluice_take_item_t *items, size_t n,
			  int64_t now_us, sluice_store_cb cb, void *arg)
{
	return sluice_redis_penalize(((redis_impl_t *)impl)->r, items, n, cb,
				     arg);
}

static int redis_block(void *impl, sluice_take_item_t *items, size_t n,
		       uint64_t ms, int64_t now_us, sluice_store_cb cb,
		       void *arg)
{
	return sluice_redis_block(((redis_impl_t *)impl)->r, items, n, ms, cb,
				  arg);
}

/* A reservation: sluice_redis_reserve() has the driver's shape. */
static int redis_reserve(void *impl, const sluice_take_item_t *item,
			 uint64_t max_wait_us, int64_t now_us,
			 sluice_store_reserve_cb cb, void *arg)
{
	return sluice_redis_reserve(((redis_impl_t *)impl)->r, item->key,
				    item->keylen, item->limits, item->nlimits,
				    item->cost, max_wait_us, cb, arg);
}

/* A conditional refund: sluice_redis_refund_if() has the driver's shape
 * (at the server's clock). */
static int redis_refund_if(void *impl, const sluice_take_item_t *item,
			   const sluice_state_t *expected, int64_t now_us,
			   sluice_store_cb cb, void *arg)
{
	(void)now_us;
	return sluice_redis_refund_if(((redis_impl_t *)impl)->r, item->key,
				      item->keylen, item->limits, item->nlimits,
				      item->cost, expected, cb, arg);
}

static int redis_set(void *impl, sluice_take_item_t *items, size_t n,
		     uint64_t remaining, int64_t now_us, sluice_store_cb cb,
		     void *arg)
{
	return sluice_redis_set(((redis_impl_t *)impl)->r, items, n, remaining,
				cb, arg);
}

/* A carry (or an import) over several items: one sluice_redis_carry()
 * (sluice_redis_import()) each (the module keeps the script's state, so
 * the script carries either way), the driver's callback once, with the
 * first failure; `allowed`: some item said 1 (an import: some usage was
 * imported; a carry: always). */
typedef struct {
	size_t pending;
	int status;
	int any;
	sluice_store_cb cb;
	void *arg;
} carry_t;

static void carry_one_done(void *arg, int status, int allowed)
{
	carry_t *c = arg;

	if (status && !c->status)
		c->status = status;
	if (status == 0 && allowed)
		c->any = 1;
	if (--c->pending == 0) {
		c->cb(c->arg, c->status, c->any);
		free(c);
	}
}

/* Sends items[i] of a fan-out, answering into carry_one_done(c). */
typedef int (*fan_send_fn)(sluice_redis_t *r, const void *items, size_t i,
			   carry_t *c);

static int fan_out(void *impl, const void *items, size_t n, fan_send_fn send,
		   int carry, sluice_store_cb cb, void *arg)
{
	carry_t *c;
	size_t i;
	int rc;

	if (!(c = calloc(1, sizeof(*c))))
		return SLUICE_ENOMEM;
	c->cb = cb;
	c->arg = arg;
	c->pending = 1; /* held while sending */
	for (i = 0; i < n; i++) {
		c->pending++;
		rc = send(((redis_impl_t *)impl)->r, items, i, c);
		if (rc < 0) {
			c->pending--;
			if (!c->status)
				c->status = rc;
		}
	}
	carry_one_done(c, 0, carry);
	return 0;
}

static int send_carry(sluice_redis_t *r, const void *items, size_t i,
		      carry_t *c)
{
	const sluice_carry_item_t *it = (const sluice_carry_item_t *)items + i;

	return sluice_redis_carry(r, it->key, it->keylen, it->to, it->from,
				  it->nfrom, carry_one_done, c);
}

static int redis_carry(void *impl, const sluice_carry_item_t *items, size_t n,
		       int64_t now_us, sluice_store_cb cb, void *arg)
{
	(void)now_us; /* the server's clock */
	return fan_out(impl, items, n, send_carry, 1, cb, arg);
}

static int send_import(sluice_redis_t *r, const void *items, size_t i,
		       carry_t *c)
{
	const sluice_import_item_t *it =
		(const sluice_import_item_t *)items + i;

	return sluice_redis_import(r, it->key, it->keylen, it->limit,
				   it->counter, it->counterlen, it->window_ms,
				   carry_one_done, c);
}

static int redis_import(void *impl, const sluice_import_item_t *items, size_t n,
			int64_t now_us, sluice_store_cb cb, void *arg)
{
	(void)now_us; /* the server's clock */
	return fan_out(impl, items, n, send_import, 0, cb, arg);
}

/* A peek of one item: its outputs, then the driver's callback. */
typedef struct {
	sluice_take_item_t *it;
	sluice_store_cb cb;
	void *arg;
} peek_t;

static void peek_done(void *arg, int status, int allowed,
		      const sluice_decision_t *summary, size_t which)
{
	peek_t *p = arg;

	(void)which;
	if (status == 0) {
		p->it->allowed = allowed;
		p->it->summary = *summary;
	}
	p->cb(p->arg, status, status == 0 && allowed);
	free(p);
}

static int redis_peek(void *impl, sluice_take_item_t *items, size_t n,
		      int64_t now_us, sluice_store_cb cb, void *arg)
{
	peek_t *p;
	int rc;

	if (n != 1)
		return SLUICE_EINVAL;
	if (!(p = malloc(sizeof(*p))))
		return SLUICE_ENOMEM;
	p->it = items;
	p->cb = cb;
	p->arg = arg;
	rc = sluice_redis_peek(((redis_impl_t *)impl)->r, items->key,
			       items->keylen, items->limits, items->nlimits,
			       items->cost, peek_done, p);
	if (rc < 0)
		free(p);
	return rc;
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

	detach(d);
	sluice_redis_free(d->r);
	free(d);
}

static void redis_free_then(void *impl, void (*done)(void *arg), void *arg)
{
	redis_impl_t *d = impl;

	detach(d);
	sluice_redis_free_then(d->r, done, arg);
	free(d);
}

const sluice_store_ops_t sluice_redis_store_ops = {
	.name = "redis",
	.take = redis_take,
	.reset = redis_reset,
	.refund = redis_refund,
	.peek = redis_peek,
	.penalize = redis_penalize,
	.block = redis_block,
	.healthy = redis_healthy,
	.stats = NULL,
	.free = redis_free,
	.free_then = redis_free_then,
	.reserve = redis_reserve,
	.set = redis_set,
	.carry = redis_carry,
	.import = redis_import,
	.refund_if = redis_refund_if,
};

/* Opens the client on a libuv loop (uv) or on a host's loop table
 * (sloop): one of the two is given. */
static int store_open(void **impl, const sluice_store_config_t *store, void *uv,
		      sluice_loop_t *sloop, const sluice_store_events_t *events,
		      char *err, size_t errlen)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_tls_t tls = {0};
	sluice_redis_sentinel_t sentinel = {0};
	redis_impl_t *d = calloc(1, sizeof(*d));
	const sluice_store_hooks_t *h = sluice_store_hooks();
	int rc;

	if (!d) {
		snprintf(err, errlen, "redis store: out of memory");
		return SLUICE_ENOMEM;
	}
	if (events) {
		/* The backend's own listener, not the process's. */
		o.on_event = events->on_event;
		o.on_report = events->on_report;
		d->hook_arg = events->arg;
	} else {
		/* NULL (out of memory) only loses the node metrics. */
		o.on_event = h->on_event;
		o.on_report = h->on_report;
		d->hook_arg = h->attach ? h->attach() : NULL;
		d->attached = 1;
	}
	if (store->kind == SLUICE_STORE_REDIS_CLUSTER) {
		o.seeds = (const char *const *)store->seeds;
		o.nseeds = store->nseeds;
	} else if (store->sentinel.master) {
		/* The Sentinels name the master; the URL (if any) gives
		 * its credentials, db and scheme. */
		sentinel.master = store->sentinel.master;
		sentinel.addrs = (const char *const *)store->sentinel.addrs;
		sentinel.naddrs = store->sentinel.naddrs;
		sentinel.user = store->sentinel.user;
		sentinel.password = store->sentinel.password;
		sentinel.tls = store->sentinel.tls;
		o.sentinel = &sentinel;
		o.url = store->url;
	} else {
		o.url = store->url ? store->url : SLUICE_DEFAULT_REDIS_URL;
	}
	if (store->tls.enabled) {
		/* The client copies these: locals outlive the call. */
		tls.enabled = 1;
		tls.ca_file = store->tls.ca_file;
		tls.cert_file = store->tls.cert_file;
		tls.key_file = store->tls.key_file;
		tls.server_name = store->tls.server_name;
		tls.verify = store->tls.verify ? SLUICE_REDIS_TLS_VERIFY_ON
					       : SLUICE_REDIS_TLS_VERIFY_OFF;
		o.tls = &tls;
	}
	o.key_prefix = store->key_prefix;
	o.timeout_ms = store->timeout_ms;
	o.connections = store->connections;
	o.flags = store->redis_flags;
	o.event_arg = d->hook_arg;
	rc = sloop ? sluice_redis_open_loop(&d->r, sloop, &o, err, errlen)
		   : sluice_redis_open(&d->r, uv, &o, err, errlen);
	if (rc < 0) {
		detach(d);
		free(d);
		return rc;
	}
	*impl = d;
	return 0;
}

int sluice_redis_store_open(void **impl, const sluice_store_config_t *store,
			    void *loop, const sluice_store_events_t *events,
			    char *err, size_t errlen)
{
	return store_open(impl, store, loop, NULL, events, err, errlen);
}

int sluice_redis_store_open_loop(void **impl,
				 const sluice_store_config_t *store,
				 sluice_loop_t *loop,
				 const sluice_store_events_t *events, char *err,
				 size_t errlen)
{
	if (!loop) {
		snprintf(err, errlen, "redis store: no loop");
		return SLUICE_EINVAL;
	}
	return store_open(impl, store, NULL, loop, events, err, errlen);
}
