/*
 * test_memstore_one.c -- the single take of one limit, the memory and
 * shared-memory stores' hot path, has a road of its own (buckets_take.c:
 * take_one()): it decides and charges exactly as the general path of
 * several limits does, for every cost, rate and time; an invalid limit
 * changes nothing; and the key's hash, which names a bucket in a shared
 * file, is the same as before.
 */
#include "check.h"
#include "sluice.h"
#include "stores.h"
#include "util/siphash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int64_t T0 = INT64_C(1700000000000000);

/*
 * SipHash-1-3-128 under the key 00 01 .. 0f of the messages 00 01 .. of
 * these lengths, as this implementation has always computed it: a shared
 * store's file holds these hashes (the buckets' identities), so another
 * build of the hash must give the same, bit for bit, in line or not.
 */
static void test_siphash_output_is_pinned(void)
{
	static const struct {
		size_t len;
		uint64_t h0, h1;
	} want[] = {
		{0, UINT64_C(0xbea58827b2bc7ee7), UINT64_C(0x013030dd6adb62fd)},
		{1, UINT64_C(0xa8edd36004376ffc), UINT64_C(0x63f02f2bcc73055e)},
		{7, UINT64_C(0xc3e0aaf223b98410), UINT64_C(0x77ab4808c82e2fa6)},
		{8, UINT64_C(0xb4dae3d5e1fe12aa), UINT64_C(0x99c7f935ab164f72)},
		{15, UINT64_C(0x6c52bdb205557ec1),
		 UINT64_C(0x09017e1eeccd2129)},
		{16, UINT64_C(0xeb8e511557d9a8d0),
		 UINT64_C(0x93179e3df8b013b5)},
		{17, UINT64_C(0x8d66bb3ff9264123),
		 UINT64_C(0xecf7bdfee8125197)},
		{24, UINT64_C(0xca92fdbc37f84b9e),
		 UINT64_C(0x4ad0841a06d209ce)},
		{63, UINT64_C(0x6f42fe4ee300584c),
		 UINT64_C(0xad6052a70a6b9f07)},
	};
	uint8_t key[16], msg[64];
	uint64_t h[2], g[2];
	size_t i;

	for (i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)i;
	for (i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)i;
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		sluice_siphash13_128(key, msg, want[i].len, h);
		sluice_siphash13_128_in(key, msg, want[i].len, g);
		CHECK_EQ_U64(h[0], want[i].h0);
		CHECK_EQ_U64(h[1], want[i].h1);
		CHECK_EQ_U64(g[0], want[i].h0);
		CHECK_EQ_U64(g[1], want[i].h1);
	}
}

/* A shared-memory store in a fresh file of its own. */
static sluice_shmstore_t *open_shm(char *path, size_t pathlen, size_t keys)
{
	sluice_shmstore_t *s = NULL;
	char err[256];

	snprintf(path, pathlen, "/dev/shm/sluice-test-one-%d", getpid());
	unlink(path);
	if (sluice_shmstore_open(&s, path, keys, err, sizeof(err)) != 0)
		fprintf(stderr, "open %s: %s\n", path, err);
	return s;
}

/*
 * One limit given twice is one bucket, charged once, decided by the
 * general path (sluice_eval_all() over every limit); given once, by the
 * single take's own.  Both must answer alike, take after take, over fresh
 * and known keys, costs from 0 (a peek's) past the capacity (never), rates
 * with a fraction of a microsecond per token, and time that stands still,
 * creeps, or jumps until buckets are full and reclaimed.  take_each()
 * batches of one-limit items, and the shared-memory store's single takes,
 * go the single take's road too.  Each store has room for every bucket
 * (none evicts), so their hash seeds cannot matter.
 */
static void test_one_limit_decides_as_the_general_path(void)
{
	sluice_memstore_t *one = open_memstore(100000);
	sluice_memstore_t *gen = open_memstore(100000);
	sluice_memstore_t *each = open_memstore(100000);
	char path[128];
	sluice_shmstore_t *shm = open_shm(path, sizeof(path), 100000);
	sluice_limit_t limits[] = {
		lim(3, "1/s"),	 lim(100, "2/s"), lim(7, "3/2s"),
		lim(1, "1/min"), lim(50, "7/3s"), lim(1000000, "999/s"),
	};
	const size_t nl = sizeof(limits) / sizeof(limits[0]);
	uint64_t seed = 7, allowed = 0, refused = 0;
	int64_t now = T0;
	int i;

	CHECK(one && gen && each && shm);
	for (i = 0; i < 60000; i++) {
		uint64_t r = test_rand(&seed);
		const sluice_limit_t *l = &limits[r % nl];
		sluice_limit_t twice[2];
		char key[24];
		int len = snprintf(key, sizeof(key), "k%llu",
				   (unsigned long long)(r >> 8) % 3000);
		uint64_t cost = (r >> 20) % 8 == 0   ? l->capacity + 1
				: (r >> 20) % 8 == 1 ? 0
						     : (r >> 24) % 4 + 1;
		sluice_decision_t d1, s1, d2[2], s2, s3, s4;
		sluice_take_item_t it;
		int a, b, c, e;

		/* Time: mostly a few ms on, sometimes an hour (everything
		 * refills and is reclaimed), sometimes not at all. */
		switch ((r >> 40) % 16) {
		case 0:
			now += INT64_C(3600000000);
			break;
		case 1:
			break;
		default:
			now += (int64_t)((r >> 44) % 5000);
		}
		twice[0] = twice[1] = *l;
		a = sluice_memstore_take(one, key, (size_t)len, l, 1, cost, now,
					 &d1, &s1);
		b = sluice_memstore_take(gen, key, (size_t)len, twice, 2, cost,
					 now, d2, &s2);
		memset(&it, 0, sizeof(it));
		it.key = key;
		it.keylen = (size_t)len;
		it.limits = l;
		it.nlimits = 1;
		it.cost = cost;
		c = sluice_memstore_take_each(each, &it, 1, now);
		s3 = it.summary;
		e = sluice_shmstore_take(shm, key, (size_t)len, l, 1, cost, now,
					 NULL, &s4);
		CHECK(a == 0 || a == 1);
		CHECK(a == b && a == c && a == e);
		CHECK(it.allowed == a);
		CHECK(same_decision(&d1, &d2[0]));
		CHECK(same_decision(&s1, &s2));
		CHECK(same_decision(&s1, &d1));
		CHECK(same_decision(&s1, &s3));
		CHECK(same_decision(&s1, &s4));
		if (a)
			allowed++;
		else
			refused++;
	}
	/* Both answers were given many times. */
	CHECK(allowed > 1000 && refused > 1000);
	sluice_memstore_free(one);
	sluice_memstore_free(gen);
	sluice_memstore_free(each);
	sluice_shmstore_close(shm);
	unlink(path);
}

/* The single take checks its limit after it has hashed the key and asked
 * for the bucket's lines: an invalid limit, or a NULL key of some length,
 * is refused and changes nothing, before or after a valid take. */
static void test_invalid_take_changes_nothing(void)
{
	sluice_limit_t l = lim(10, "1/s"), bad = l;
	sluice_memstore_t *m = open_memstore(100);
	sluice_memstore_stats_t st;
	sluice_decision_t d, sum;

	CHECK(m);
	bad.tau = l.tau + 1;
	CHECK(sluice_memstore_take(m, "k", 1, &bad, 1, 1, T0, &d, &sum) ==
	      SLUICE_EINVAL);
	CHECK(sluice_memstore_take(m, NULL, 1, &l, 1, 1, T0, &d, &sum) ==
	      SLUICE_EINVAL);
	CHECK(sluice_memstore_take(m, "k", 1, NULL, 1, 1, T0, &d, &sum) ==
	      SLUICE_EINVAL);
	sluice_memstore_stats(m, &st);
	CHECK_EQ_U64(st.keys, 0);

	CHECK(sluice_memstore_take(m, "k", 1, &l, 1, 4, T0, &d, &sum) == 1);
	CHECK_EQ_U64(sum.remaining, 6);
	/* The same key under a bad limit: refused, its bucket untouched. */
	bad = l;
	bad.rate.interval = 0;
	CHECK(sluice_memstore_take(m, "k", 1, &bad, 1, 4, T0, &d, &sum) ==
	      SLUICE_EINVAL);
	CHECK(sluice_memstore_peek(m, "k", 1, &l, 1, 0, T0, &d, &sum) == 1);
	CHECK_EQ_U64(sum.remaining, 6);
	sluice_memstore_stats(m, &st);
	CHECK_EQ_U64(st.keys, 1);
	sluice_memstore_free(m);
}

int main(void)
{
	RUN(test_siphash_output_is_pinned);
	RUN(test_one_limit_decides_as_the_general_path);
	RUN(test_invalid_take_changes_nothing);
	TESTS_DONE();
}
