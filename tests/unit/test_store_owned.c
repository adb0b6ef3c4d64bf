/*
 * test_store_owned.c -- sluice_backend_open() with no process-wide store
 * given opens the memory or shared-memory store itself, from the config,
 * and closes it with the backend (store.h): how a host with one store per
 * object (the Node addon's Limiter) opens every store through the same
 * registry `sluice serve` uses.  Leaks show under the test build's
 * LeakSanitizer.
 */
#include "check.h"
#include "store/store.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define T0 1000000000000LL

typedef struct answer_s {
	int calls, status, allowed;
} answer_t;

static void on_answer(void *arg, int status, int allowed)
{
	answer_t *a = arg;

	a->calls++;
	a->status = status;
	a->allowed = allowed;
}

/* A take of cost on `key` (limit 10, 1/h); its remaining count. */
static uint64_t take(sluice_backend_t *be, const char *key, uint64_t cost)
{
	sluice_limit_t l;
	sluice_take_item_t it;
	answer_t a = {0};

	CHECK(sluice_limit_parse(&l, "10", "1/h", NULL, 0) == 0);
	memset(&it, 0, sizeof(it));
	it.key = key;
	it.keylen = strlen(key);
	it.limits = &l;
	it.nlimits = 1;
	it.cost = cost;
	CHECK(be->ops->take(be->impl, &it, 1, T0, on_answer, &a) == 0);
	/* A local store answers before the call returns. */
	CHECK(a.calls == 1 && a.status == 0 && a.allowed == 1);
	return it.summary.remaining;
}

static void on_closed(void *arg)
{
	(*(int *)arg)++;
}

static void test_memory_store_of_its_own(void)
{
	sluice_store_config_t cfg;
	sluice_backend_t be, other;
	char err[256];
	int closed = 0;

	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = SLUICE_STORE_MEMORY;
	cfg.max_keys = 100;
	CHECK(sluice_backend_open(&be, &cfg, NULL, NULL, NULL, err,
				  sizeof(err)) == 0);
	CHECK(strcmp(be.ops->name, "memory") == 0 && be.impl && be.local);
	CHECK(take(&be, "k", 3) == 7);
	/* Another backend opened so has a store of its own. */
	CHECK(sluice_backend_open(&other, &cfg, NULL, NULL, NULL, err,
				  sizeof(err)) == 0);
	CHECK(other.impl != be.impl);
	CHECK(take(&other, "k", 1) == 9);
	CHECK(take(&be, "k", 1) == 6);
	sluice_backend_close(&other);
	sluice_backend_close_then(&be, on_closed, &closed);
	CHECK(closed == 1 && be.ops == NULL);
}

static void test_memory_store_of_the_host_stays_open(void)
{
	sluice_store_config_t cfg;
	sluice_memstore_t *m = NULL;
	sluice_backend_t be;
	char err[256];

	CHECK(sluice_memstore_open(&m, 100, NULL, 0) == 0);
	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = SLUICE_STORE_MEMORY;
	CHECK(sluice_backend_open(&be, &cfg, NULL, m, NULL, err, sizeof(err)) ==
	      0);
	CHECK(be.impl == m && be.ops == &sluice_memory_store_ops);
	CHECK(take(&be, "k", 2) == 8);
	sluice_backend_close(&be);
	/* Still the host's, still open: the same bucket. */
	sluice_backend_memory(&be, m);
	CHECK(take(&be, "k", 2) == 6);
	sluice_memstore_free(m);
}

static void test_shared_store_of_its_own(void)
{
	sluice_store_config_t cfg;
	sluice_backend_t a, b;
	char path[64], err[256];

	snprintf(path, sizeof(path), "/dev/shm/sluice-test-owned-%d",
		 (int)getpid());
	unlink(path);
	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = SLUICE_STORE_SHARED;
	cfg.shm_path = path;
	cfg.max_keys = 1000;
	CHECK(sluice_backend_open(&a, &cfg, NULL, NULL, NULL, err,
				  sizeof(err)) == 0);
	CHECK(strcmp(a.ops->name, "shared") == 0);
	CHECK(access(path, F_OK) == 0);
	/* Two mappings of one file: one bucket. */
	CHECK(sluice_backend_open(&b, &cfg, NULL, NULL, NULL, err,
				  sizeof(err)) == 0);
	CHECK(take(&a, "k", 4) == 6);
	CHECK(take(&b, "k", 4) == 2);
	sluice_backend_close(&a);
	CHECK(take(&b, "k", 1) == 1);
	sluice_backend_close(&b);
	unlink(path);
}

static void test_shared_store_that_cannot_open_says_which_file(void)
{
	sluice_store_config_t cfg;
	sluice_backend_t be;
	char err[256] = "";

	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = SLUICE_STORE_SHARED;
	cfg.shm_path = "/nonexistent-dir/sluice-owned";
	cfg.max_keys = 10;
	CHECK(sluice_backend_open(&be, &cfg, NULL, NULL, NULL, err,
				  sizeof(err)) < 0);
	CHECK(strstr(err, "/nonexistent-dir/sluice-owned") != NULL);
	CHECK(be.ops == NULL);
}

/* take_now, the local stores' synchronous path: the decision returned,
 * outputs written, the same state as take; a peek charges nothing. */
static void test_take_now_decides_as_take(void)
{
	sluice_store_config_t cfg;
	sluice_backend_t be;
	sluice_limit_t l;
	sluice_take_item_t it;
	char err[256];

	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = SLUICE_STORE_MEMORY;
	cfg.max_keys = 100;
	CHECK(sluice_backend_open(&be, &cfg, NULL, NULL, NULL, err,
				  sizeof(err)) == 0);
	CHECK(be.ops->take_now != NULL);
	CHECK(sluice_redis_store_ops.take_now == NULL);
	CHECK(sluice_limit_parse(&l, "10", "1/h", NULL, 0) == 0);
	memset(&it, 0, sizeof(it));
	it.key = "k";
	it.keylen = 1;
	it.limits = &l;
	it.nlimits = 1;
	it.cost = 4;
	CHECK(be.ops->take_now(be.impl, &it, T0, 0) == 1);
	CHECK(it.allowed == 1 && it.summary.remaining == 6);
	CHECK(take(&be, "k", 1) == 5);
	/* A peek of 6: refused, nothing charged; of 5: allowed. */
	it.cost = 6;
	CHECK(be.ops->take_now(be.impl, &it, T0, 1) == 0 && it.allowed == 0);
	it.cost = 5;
	CHECK(be.ops->take_now(be.impl, &it, T0, 1) == 1);
	CHECK(it.summary.remaining == 0);
	CHECK(take(&be, "k", 1) == 4);
	/* A malformed item: the code, as take() returns it. */
	it.nlimits = 0;
	CHECK(be.ops->take_now(be.impl, &it, T0, 0) == SLUICE_EINVAL);
	sluice_backend_close(&be);
}

int main(void)
{
	RUN(test_memory_store_of_its_own);
	RUN(test_memory_store_of_the_host_stays_open);
	RUN(test_shared_store_of_its_own);
	RUN(test_shared_store_that_cannot_open_says_which_file);
	RUN(test_take_now_decides_as_take);
	TESTS_DONE();
}
