/*
 * fake_store.h -- a store driver for tests that answers later, the way a
 * network store (Redis) does: take() only queues the call, deferred_run()
 * answers what was queued so far from a memory store.
 */
#ifndef SLUICE_TEST_FAKE_STORE_H
#define SLUICE_TEST_FAKE_STORE_H

#include "policy/config/config.h"
#include "store/store.h"

#include <string.h>

/* Queues every call and answers it from a memory store when told to. */
typedef struct deferred_s {
	sluice_memstore_t *store;
	struct {
		sluice_take_item_t *items;
		size_t n;
		int64_t now_us;
		sluice_store_cb cb;
		void *arg;
	} q[256];
	size_t n;
} deferred_t;

static int deferred_take(void *impl, sluice_take_item_t *items, size_t n,
			 int64_t now_us, sluice_store_cb cb, void *arg)
{
	deferred_t *d = impl;

	d->q[d->n].items = items;
	d->q[d->n].n = n;
	d->q[d->n].now_us = now_us;
	d->q[d->n].cb = cb;
	d->q[d->n].arg = arg;
	d->n++;
	return 0;
}

/* Answers the calls queued so far (new ones wait for the next round). */
__attribute__((unused)) static size_t deferred_run(deferred_t *d)
{
	size_t n = d->n, i;

	for (i = 0; i < n; i++) {
		int r = sluice_memstore_take_many(d->store, d->q[i].items,
						  d->q[i].n, d->q[i].now_us);

		d->q[i].cb(d->q[i].arg, r < 0 ? r : 0, r > 0);
	}
	memmove(d->q, d->q + n, (d->n - n) * sizeof(d->q[0]));
	d->n -= n;
	return n;
}

static const sluice_store_ops_t deferred_ops
	__attribute__((unused)) = {.name = "deferred", .take = deferred_take};

#endif /* SLUICE_TEST_FAKE_STORE_H */
