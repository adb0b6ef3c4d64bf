/*
 * test_store_ops.c -- the store drivers' interface (store/store.h) on the
 * memory and the shared-memory store: every verb (take, peek, penalize,
 * block, refund, reset) through the driver, the same answers from both,
 * and the callback once per call that returns 0.
 */
#include "check.h"
#include "store/store.h"
#include "stores.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define T0 1000000000000LL /* a fixed clock, in microseconds */

typedef struct seen_s {
	int calls, status, allowed;
} seen_t;

static void on_done(void *arg, int status, int allowed)
{
	seen_t *s = arg;

	s->calls++;
	s->status = status;
	s->allowed = allowed;
}

static void item(sluice_take_item_t *it, const char *key,
		 const sluice_limit_t *l, size_t n, uint64_t cost)
{
	memset(it, 0, sizeof(*it));
	it->key = key;
	it->keylen = strlen(key);
	it->limits = l;
	it->nlimits = n;
	it->cost = cost;
}

/* Runs every verb on one driver; the remaining counts are those the
 * limit (capacity 10, 1/h) must show. */
static void every_verb(const sluice_store_ops_t *ops, void *impl)
{
	sluice_limit_t l;
	sluice_take_item_t it;
	seen_t s = {0};

	CHECK(sluice_limit_parse(&l, "10", "1/h", NULL, 0) == 0);
	item(&it, "k", &l, 1, 3);
	CHECK(ops->take(impl, &it, 1, T0, on_done, &s) == 0);
	CHECK(s.calls == 1 && s.status == 0 && s.allowed == 1);
	CHECK(it.allowed == 1 && it.summary.remaining == 7);

	/* A peek charges nothing. */
	item(&it, "k", &l, 1, 8);
	CHECK(ops->peek(impl, &it, 1, T0, on_done, &s) == 0);
	CHECK(s.calls == 2 && s.status == 0 && s.allowed == 0);
	CHECK(it.allowed == 0);
	item(&it, "k", &l, 1, 7);
	CHECK(ops->peek(impl, &it, 1, T0, on_done, &s) == 0);
	CHECK(s.calls == 3 && s.allowed == 1 && it.summary.remaining == 0);

	/* A penalty of 5 leaves 2; a refund of 4 gives back up to 6. */
	item(&it, "k", &l, 1, 5);
	CHECK(ops->penalize(impl, &it, 1, T0, on_done, &s) == 0);
	CHECK(s.calls == 4 && s.status == 0);
	item(&it, "k", &l, 1, 0);
	CHECK(ops->peek(impl, &it, 1, T0, on_done, &s) == 0);
	CHECK(it.summary.remaining == 2);
	item(&it, "k", &l, 1, 4);
	CHECK(ops->refund(impl, &it, 1, T0, on_done, &s) == 0);
	item(&it, "k", &l, 1, 0);
	CHECK(ops->peek(impl, &it, 1, T0, on_done, &s) == 0);
	CHECK(it.summary.remaining == 6);

	/* A block lets nothing pass; a reset makes the bucket full. */
	item(&it, "k", &l, 1, 1);
	CHECK(ops->block(impl, &it, 1, 60000, T0, on_done, &s) == 0);
	CHECK(ops->take(impl, &it, 1, T0, on_done, &s) == 0);
	CHECK(s.status == 0 && s.allowed == 0);
	CHECK(ops->reset(impl, &it, 1, on_done, &s) == 0);
	CHECK(ops->take(impl, &it, 1, T0, on_done, &s) == 0);
	CHECK(s.allowed == 1 && it.summary.remaining == 9);
	CHECK(s.calls == 11);

	/* A malformed item: a negative return and no callback. */
	item(&it, "k", &l, 0, 1);
	CHECK(ops->take(impl, &it, 1, T0, on_done, &s) == SLUICE_EINVAL);
	CHECK(ops->peek(impl, &it, 1, T0, on_done, &s) == SLUICE_EINVAL);
	CHECK(ops->penalize(impl, &it, 1, T0, on_done, &s) == SLUICE_EINVAL);
	CHECK(ops->block(impl, &it, 1, 1, T0, on_done, &s) == SLUICE_EINVAL);
	CHECK(s.calls == 11);
}

static void test_memory_driver(void)
{
	sluice_memstore_t *m = open_memstore(1000);
	sluice_backend_t be;

	CHECK(m);
	sluice_backend_memory(&be, m);
	CHECK(strcmp(be.ops->name, "memory") == 0);
	every_verb(be.ops, be.impl);
	sluice_backend_close(&be);
	sluice_memstore_free(m);
}

static void test_shared_driver(void)
{
	sluice_store_config_t cfg;
	sluice_shmstore_t *shm = NULL;
	sluice_backend_t be;
	char path[64], err[256];

	snprintf(path, sizeof(path), "/dev/shm/sluice-test-ops-%d",
		 (int)getpid());
	unlink(path);
	CHECK(sluice_shmstore_open(&shm, path, 1000, err, sizeof(err)) == 0);
	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = SLUICE_STORE_SHARED;
	CHECK(sluice_backend_open(&be, &cfg, NULL, NULL, shm, err,
				  sizeof(err)) == 0);
	CHECK(strcmp(be.ops->name, "shared") == 0);
	every_verb(be.ops, be.impl);
	sluice_backend_close(&be);
	sluice_shmstore_close(shm);
	unlink(path);
}

int main(void)
{
	RUN(test_memory_driver);
	RUN(test_shared_driver);
	TESTS_DONE();
}
