/*
 * fake_store.h -- a store driver for tests that answers later, the way a
 * network store (Redis) does: take() only queues the call, deferred_run()
 * answers what was queued so far from a memory store.
 */
#ifndef SLUICE_TEST_FAKE_STORE_H
#define SLUICE_TEST_FAKE_STORE_H

#include "serve/backend.h"

#include <string.h>

/* Queues every call and answers it from a memory store when told to. */
typedef struct deferred_s {
	sluice_memstore_t *store;
	struct {
		char key[512];
		size_t keylen;
		const sluice_limit_t *limits;
		size_t nlimits;
		uint64_t cost;
		sluice_store_cb cb;
		void *arg;
	} q[32];
	size_t n;
} deferred_t;

static int deferred_take(void *impl, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits,
			 uint64_t cost, sluice_store_cb cb, void *arg)
{
	deferred_t *d = impl;

	memcpy(d->q[d->n].key, key, keylen);
	d->q[d->n].keylen = keylen;
	d->q[d->n].limits = limits;
	d->q[d->n].nlimits = nlimits;
	d->q[d->n].cost = cost;
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
		sluice_decision_t sum;
		int r = sluice_memstore_take(d->store, d->q[i].key,
					     d->q[i].keylen, d->q[i].limits,
					     d->q[i].nlimits, d->q[i].cost,
					     sluice_now_us(), NULL, &sum);
		d->q[i].cb(d->q[i].arg, 0, r, &sum, sum.which);
	}
	memmove(d->q, d->q + n, (d->n - n) * sizeof(d->q[0]));
	d->n -= n;
	return n;
}

static const sluice_store_ops_t deferred_ops
	__attribute__((unused)) = {.name = "deferred", .take = deferred_take};

#endif /* SLUICE_TEST_FAKE_STORE_H */
