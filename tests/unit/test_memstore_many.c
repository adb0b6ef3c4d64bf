/*
 * test_memstore_many.c -- sluice_memstore_take_many(): several keys
 * charged all or nothing, atomically under any number of threads.
 */
#include "check.h"
#include "sluice.h"
#include "stores.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static void item(sluice_take_item_t *it, const char *key,
		 const sluice_limit_t *limits, size_t n, uint64_t cost)
{
	memset(it, 0, sizeof(*it));
	it->key = key;
	it->keylen = strlen(key);
	it->limits = limits;
	it->nlimits = n;
	it->cost = cost;
}

/* Tokens left in key's bucket (a cost-0 take). */
static uint64_t left(sluice_memstore_t *m, const char *key,
		     const sluice_limit_t *limits, size_t n, int64_t now)
{
	sluice_take_item_t it;

	item(&it, key, limits, n, 0);
	if (sluice_memstore_take_many(m, &it, 1, now) != 1)
		abort();
	return it.summary.remaining;
}

static const int64_t T0 = INT64_C(1700000000000000);

static void test_one_rejecting_key_charges_none(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_limit_t big = lim(10, "1/h"), small = lim(1, "1/h");
	sluice_take_item_t it[2];

	item(&it[0], "a", &big, 1, 1);
	item(&it[1], "b", &small, 1, 1);
	CHECK(sluice_memstore_take_many(m, it, 2, T0) == 1);
	CHECK(it[0].allowed && it[1].allowed);
	CHECK_EQ_U64(it[0].summary.remaining, 9);
	CHECK(sluice_memstore_take_many(m, it, 2, T0) == 0);
	CHECK(it[0].allowed && !it[1].allowed); /* a alone would pass */
	CHECK(it[1].summary.retry_after_us > 0);
	CHECK_EQ_U64(left(m, "a", &big, 1, T0), 9); /* not charged */
	sluice_memstore_free(m);
}

static void test_which_names_the_most_restrictive_limit(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_limit_t two[2] = {lim(10, "1/s"), lim(3, "1/h")};
	sluice_take_item_t it;

	item(&it, "k", two, 2, 1);
	CHECK(sluice_memstore_take_many(m, &it, 1, T0) == 1);
	CHECK_EQ_U64(it.summary.which, 1);
	CHECK_EQ_U64(it.summary.remaining, 2);
	sluice_memstore_free(m);
}

static void test_a_repeated_key_is_charged_for_each_item(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_limit_t l = lim(3, "1/h");
	sluice_take_item_t it[2];

	item(&it[0], "k", &l, 1, 2);
	item(&it[1], "k", &l, 1, 2);
	CHECK(sluice_memstore_take_many(m, it, 2, T0) == 0); /* 2 + 2 > 3 */
	CHECK_EQ_U64(left(m, "k", &l, 1, T0), 3);
	it[0].cost = it[1].cost = 1;
	CHECK(sluice_memstore_take_many(m, it, 2, T0) == 1);
	CHECK_EQ_U64(it[1].summary.remaining, 1);
	CHECK_EQ_U64(left(m, "k", &l, 1, T0), 1);
	sluice_memstore_free(m);
}

static void test_malformed_items_are_refused(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_limit_t two[SLUICE_MAX_LIMITS + 1];
	sluice_take_item_t it[1];

	two[0] = lim(3, "1/h");
	item(&it[0], "k", two, 0, 1);
	CHECK(sluice_memstore_take_many(m, it, 1, T0) == SLUICE_EINVAL);
	item(&it[0], "k", two, SLUICE_MAX_LIMITS + 1, 1);
	CHECK(sluice_memstore_take_many(m, it, 1, T0) == SLUICE_EINVAL);
	item(&it[0], "k", two, 1, 1);
	it[0].key = NULL; /* 1 byte from nowhere */
	CHECK(sluice_memstore_take_many(m, it, 1, T0) == SLUICE_EINVAL);
	two[1] = two[0];
	two[1].tau = 1; /* hand-built, inconsistent */
	item(&it[0], "k", two, 2, 1);
	CHECK(sluice_memstore_take_many(m, it, 1, T0) == SLUICE_EINVAL);
	CHECK(sluice_memstore_take_many(m, it, 0, T0) == 1);
	sluice_memstore_free(m);
}

/* A bucket is its key and its limit: the same key with a limit it had
 * before (another tier, another rule's set) meets that limit's state. */
static void test_a_shared_limit_keeps_its_state_across_items(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_limit_t a = lim(5, "1/h"), both[2] = {lim(100, "1/h"), a};
	sluice_take_item_t it[2];

	item(&it[0], "k", &a, 1, 3);
	item(&it[1], "k", both, 2, 2);
	CHECK(sluice_memstore_take_many(m, it, 2, T0) == 1);
	CHECK_EQ_U64(it[1].summary.remaining, 0); /* 5 - 3 - 2 */
	CHECK_EQ_U64(it[1].summary.which, 1);
	CHECK_EQ_U64(left(m, "k", &a, 1, T0), 0);
	CHECK(sluice_memstore_take_many(m, it, 1, T0) == 0);
	sluice_memstore_free(m);
}

/* ------------------------------------------------------------ threads */

enum { THREADS = 8, PER_THREAD = 400, KEYS = 40 };

typedef struct worker_s {
	sluice_memstore_t *m;
	const sluice_limit_t *shared, *own;
	int id, allowed;
} worker_t;

/* Each request charges the shared key and its thread's own key, with
 * the items in either order and the store's shards locked across many
 * keys: a deadlock would hang here, a lost update would show in the
 * counts. */
static void *worker(void *arg)
{
	worker_t *w = arg;
	char own[32], spread[KEYS][16];
	sluice_take_item_t it[2 + KEYS];
	int i, k;

	snprintf(own, sizeof(own), "own-%d", w->id);
	for (k = 0; k < KEYS; k++)
		snprintf(spread[k], sizeof(spread[k]), "s%d", k);
	for (i = 0; i < PER_THREAD; i++) {
		int flip = (i + w->id) & 1;

		item(&it[flip], "shared", w->shared, 1, 1);
		item(&it[!flip], own, w->own, 1, 1);
		for (k = 0; k < KEYS; k++)
			item(&it[2 + k], spread[k], w->own, 1, 0);
		if (sluice_memstore_take_many(w->m, it, i % 3 ? 2 : 2 + KEYS,
					      T0) == 1)
			w->allowed++;
	}
	return NULL;
}

static void test_threads_charge_exactly_the_allowed(void)
{
	sluice_memstore_t *m = open_memstore(10000);
	sluice_limit_t shared = lim(500, "1/h"), own = lim(1000, "1/h");
	pthread_t th[THREADS];
	worker_t w[THREADS];
	int i, allowed = 0;

	for (i = 0; i < THREADS; i++) {
		w[i] = (worker_t){m, &shared, &own, i, 0};
		pthread_create(&th[i], NULL, worker, &w[i]);
	}
	for (i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < THREADS; i++) {
		char key[32];

		snprintf(key, sizeof(key), "own-%d", i);
		allowed += w[i].allowed;
		/* Each thread's own key paid for its allowed requests only. */
		CHECK_EQ_U64(left(m, key, &own, 1, T0), 1000 - w[i].allowed);
	}
	CHECK_EQ_U64(allowed, 500);
	CHECK_EQ_U64(left(m, "shared", &shared, 1, T0), 0);
	sluice_memstore_free(m);
}

int main(void)
{
	RUN(test_one_rejecting_key_charges_none);
	RUN(test_which_names_the_most_restrictive_limit);
	RUN(test_a_repeated_key_is_charged_for_each_item);
	RUN(test_malformed_items_are_refused);
	RUN(test_a_shared_limit_keeps_its_state_across_items);
	RUN(test_threads_charge_exactly_the_allowed);
	TESTS_DONE();
}
