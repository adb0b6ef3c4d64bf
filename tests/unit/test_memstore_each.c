/*
 * test_memstore_each.c -- sluice_memstore_take_each(): independent
 * decisions in one call are exactly the single takes one after the other,
 * whatever the batch, the table size (growing while the batch runs) and
 * the repeats of a key within a batch.
 */
#include "check.h"
#include "sluice.h"
#include "stores.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int64_t T0 = INT64_C(1700000000000000);

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static void test_batches_decide_as_single_takes(void)
{
	/* Room for every bucket (4000 keys times 6 distinct limits, each
	 * shard far below its share): neither store evicts, so both hold the
	 * same states whatever their hash seeds.  A bound near the bucket
	 * count let one seed in a hundred evict a drained bucket in one store
	 * and not the other. */
	sluice_memstore_t *each = open_memstore(200000);
	sluice_memstore_t *one = open_memstore(200000);
	sluice_limit_t limits[3][2] = {
		{lim(3, "1/s"), lim(10, "1/min")},
		{lim(1, "5/s"), lim(2, "1/h")},
		{lim(40, "7/day"), lim(5, "2/s")},
	};
	char keys[64][24];
	sluice_take_item_t items[64];
	uint64_t seed = 21;
	int64_t now = T0;
	int round, i, mismatches = 0, allowed_total = 0;

	CHECK(each && one);
	for (round = 0; round < 400; round++) {
		int n = 1 + (int)(rnd(&seed) % 64), allowed = 0, got;
		/* Few keys early (repeats inside a batch), many later (the
		 * tables grow while batches run). */
		uint64_t span = round < 100 ? 8 : 4000;

		now += (int64_t)(rnd(&seed) % 300000);
		for (i = 0; i < n; i++) {
			int which = (int)(rnd(&seed) % 3);

			snprintf(keys[i], sizeof(keys[i]), "user:%llu",
				 (unsigned long long)(rnd(&seed) % span));
			memset(&items[i], 0, sizeof(items[i]));
			items[i].key = keys[i];
			items[i].keylen = strlen(keys[i]);
			items[i].limits = limits[which];
			items[i].nlimits = 1 + rnd(&seed) % 2;
			items[i].cost = rnd(&seed) % 4;
		}
		got = sluice_memstore_take_each(each, items, (size_t)n, now);
		for (i = 0; i < n; i++) {
			sluice_decision_t sum;
			int a = sluice_memstore_take(
				one, items[i].key, items[i].keylen,
				items[i].limits, items[i].nlimits,
				items[i].cost, now, NULL, &sum);

			allowed += a;
			if (a != items[i].allowed ||
			    !same_decision(&sum, &items[i].summary))
				mismatches++;
		}
		CHECK_EQ_U64((uint64_t)got, (uint64_t)allowed);
		allowed_total += allowed;
	}
	CHECK_EQ_U64((uint64_t)mismatches, 0);
	/* Both allowed and rejected decisions were exercised. */
	CHECK(allowed_total > 1000);
	{
		sluice_memstore_stats_t st;

		sluice_memstore_stats(each, &st);
		CHECK_EQ_U64(st.evicted_lossy + st.evicted_full, 0);
		sluice_memstore_stats(one, &st);
		CHECK_EQ_U64(st.evicted_lossy + st.evicted_full, 0);
	}
	sluice_memstore_free(each);
	sluice_memstore_free(one);
}

static void test_malformed_items_decide_nothing(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_limit_t l = lim(1, "1/h"), bad;
	sluice_take_item_t it[2];
	sluice_decision_t sum;

	memset(&bad, 0, sizeof(bad));
	memset(it, 0, sizeof(it));
	it[0].key = "a";
	it[0].keylen = 1;
	it[0].limits = &l;
	it[0].nlimits = 1;
	it[0].cost = 1;
	it[1] = it[0];
	it[1].limits = &bad;
	CHECK(sluice_memstore_take_each(m, it, 2, T0) == SLUICE_EINVAL);
	it[1].limits = &l;
	it[1].nlimits = 0;
	CHECK(sluice_memstore_take_each(m, it, 2, T0) == SLUICE_EINVAL);
	it[1].nlimits = SLUICE_MAX_LIMITS + 1;
	CHECK(sluice_memstore_take_each(m, it, 2, T0) == SLUICE_EINVAL);
	it[1].nlimits = 1;
	it[1].key = NULL;
	CHECK(sluice_memstore_take_each(m, it, 2, T0) == SLUICE_EINVAL);
	CHECK(sluice_memstore_take_each(m, NULL, 1, T0) == SLUICE_EINVAL);
	CHECK(sluice_memstore_take_each(m, NULL, 0, T0) == 0);
	/* "a" was never charged: its one token is still there. */
	CHECK(sluice_memstore_take(m, "a", 1, &l, 1, 1, T0, NULL, &sum) == 1);
	/* A key twice in one batch: the second sees the first's take. */
	it[0].key = it[1].key = "b";
	CHECK(sluice_memstore_take_each(m, it, 2, T0) == 1);
	CHECK(it[0].allowed && !it[1].allowed);
	CHECK(it[1].summary.retry_after_us > 0);
	sluice_memstore_free(m);
}

int main(void)
{
	RUN(test_batches_decide_as_single_takes);
	RUN(test_malformed_items_decide_nothing);
	TESTS_DONE();
}
