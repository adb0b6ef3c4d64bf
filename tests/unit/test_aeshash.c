/*
 * test_aeshash.c -- the stores' hash of keys up to 16 bytes
 * (util/aeshash.h): AES-128 as FIPS-197 defines it, each key's block as
 * the header says (checked against `openssl enc -aes-128-ecb -nopad` of
 * that block), the same in line and out of line, no byte read outside the
 * key, and the two classes of keys (shorter than 16 bytes, exactly 16)
 * apart even when their blocks are equal.  On a machine without AES-NI the
 * hash is not used (sluice_aeshash_init() refuses) and only that is
 * checked.  The memory store and a shared-memory file of either hash
 * decide alike.
 */
#include "check.h"
#include "sluice.h"
#include "store/shm.h"
#include "stores.h"
#include "util/aeshash.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static sluice_aeshash_t A;
static int have;

/* Keys A = 00 01 .. 0f (short keys) and B = 10 11 .. 1f (16-byte keys). */
static void init(void)
{
	uint8_t k[32];
	size_t i;

	for (i = 0; i < sizeof(k); i++)
		k[i] = (uint8_t)i;
	have = sluice_aeshash_init(&A, k) == 0;
}

/* FIPS-197 appendix C.1: AES-128, key 00 01 .. 0f. */
static void test_fips197_vector(void)
{
	static const uint8_t pt[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55,
				       0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
				       0xcc, 0xdd, 0xee, 0xff};
	static const uint8_t ct[16] = {0x69, 0xc4, 0xe0, 0xd8, 0x6a, 0x7b,
				       0x04, 0x30, 0xd8, 0xcd, 0xb7, 0x80,
				       0x70, 0xb4, 0xc5, 0x5a};
	uint8_t out[16];

	if (!have)
		return;
	sluice_aeshash_block(&A, 0, pt, out);
	CHECK(memcmp(out, ct, 16) == 0);
}

/*
 * The key of bytes (7 i + 3) mod 256, of each length: the block (key,
 * zeros, its length in byte 15) under A, or the 16 bytes under B, as
 * `openssl enc -aes-128-ecb -K <A or B> -nopad` encrypts it; the hash's
 * halves are the ciphertext's bytes 0..7 and 8..15, little-endian.
 */
static void test_pinned_vectors(void)
{
	static const struct {
		size_t len;
		uint64_t h0, h1;
	} want[] = {
		{0, UINT64_C(0x825b8f87373ba1c6), UINT64_C(0x79d8c8a162814f6f)},
		{1, UINT64_C(0xfe9f2c7cd28d5866), UINT64_C(0x30dfe2eaa4df8220)},
		{2, UINT64_C(0x9dc4d5a87578a4e8), UINT64_C(0x44fe0ead0c302c7f)},
		{3, UINT64_C(0xd25b66435a1dd00d), UINT64_C(0xb66fa6f25eb94377)},
		{4, UINT64_C(0x88a93ad87efda757), UINT64_C(0xab7377b96ce251f5)},
		{5, UINT64_C(0xc71c305f5c680b6d), UINT64_C(0xe7d712df506b2da6)},
		{6, UINT64_C(0x40f1698af54bba91), UINT64_C(0x75e4287ac173dc41)},
		{7, UINT64_C(0x53d7b5eff1b8ef9d), UINT64_C(0x000dc950947c6ad9)},
		{8, UINT64_C(0xcec8ecc047256071), UINT64_C(0x74e9fb1f54634dd5)},
		{9, UINT64_C(0x691de9078e87c1a3), UINT64_C(0x0f08563753b63df0)},
		{12, UINT64_C(0x4d3d4ca3a623bd2d),
		 UINT64_C(0x394ddcc0ed611602)},
		{15, UINT64_C(0xad791dcae3e8c534),
		 UINT64_C(0x1c21e3aa91cbd733)},
		{16, UINT64_C(0x1a10d177d2427dc7),
		 UINT64_C(0x14774f88aa7dbdb4)},
	};
	uint8_t msg[16];
	uint64_t h[2];
	size_t i;

	if (!have)
		return;
	for (i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(7 * i + 3);
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		sluice_aeshash(&A, msg, want[i].len, h);
		CHECK_EQ_U64(h[0], want[i].h0);
		CHECK_EQ_U64(h[1], want[i].h1);
#if SLUICE_HAVE_AESHASH
		{
			uint64_t g[2];

			sluice_aeshash_in(&A, msg, want[i].len, g);
			CHECK_EQ_U64(g[0], want[i].h0);
			CHECK_EQ_U64(g[1], want[i].h1);
		}
#endif
	}
}

/* Every length 0 .. 16 of many random keys: the hash is the block the
 * header describes, encrypted under the key of its class. */
static void test_every_length_is_its_block(void)
{
	uint64_t seed = 99, h[2];
	uint8_t key[16], blk[16], ct[16];
	size_t len, i;
	int n;

	if (!have)
		return;
	for (n = 0; n < 2000; n++) {
		for (i = 0; i < sizeof(key); i++)
			key[i] = (uint8_t)test_rand(&seed);
		len = (size_t)n % 17;
		memset(blk, 0, sizeof(blk));
		memcpy(blk, key, len);
		if (len < 16)
			blk[15] = (uint8_t)len;
		sluice_aeshash_block(&A, len == 16, blk, ct);
		sluice_aeshash(&A, key, len, h);
		CHECK(memcmp(&h[0], ct, 8) == 0);
		CHECK(memcmp(&h[1], ct + 8, 8) == 0);
	}
}

/* A key that ends where a page ends, before one that cannot be read: the
 * hash reads its bytes and none after (nor before: at the page's start). */
static void test_reads_only_the_key(void)
{
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *p, *end;
	uint64_t h[2], g[2];
	size_t len;

	if (!have)
		return;
	p = mmap(NULL, (size_t)page * 3, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	CHECK(mprotect(p, (size_t)page, PROT_NONE) == 0);
	CHECK(mprotect(p + 2 * page, (size_t)page, PROT_NONE) == 0);
	end = p + 2 * page;
	memset(p + page, 0x5a, (size_t)page);
	for (len = 0; len <= 16; len++) {
		sluice_aeshash(&A, end - len, len, h);
		sluice_aeshash(&A, p + page, len, g);
		CHECK_EQ_U64(h[0], g[0]);
		CHECK_EQ_U64(h[1], g[1]);
	}
	munmap(p, (size_t)page * 3);
}

/*
 * "abc" (3 bytes) and the 16 bytes "abc", twelve zeros, 3 have one block;
 * they are two keys, in two classes, under two AES keys: different hashes,
 * and in a memory store different buckets (emptying one leaves the other
 * full), as are "abc" and "abc\0" (the length is in the block).
 */
static void test_classes_apart(void)
{
	static const char k16[16] = {'a', 'b', 'c', 0, 0, 0, 0, 0,
				     0,	  0,   0,   0, 0, 0, 0, 3};
	sluice_memstore_t *m = open_memstore(100);
	sluice_limit_t l = lim(5, "1/min");
	sluice_decision_t d;
	uint64_t h[2], g[2], z[2];

	CHECK(m);
	if (have) {
		sluice_aeshash(&A, "abc", 3, h);
		sluice_aeshash(&A, k16, 16, g);
		sluice_aeshash(&A, "abc\0", 4, z);
		CHECK(h[0] != g[0] || h[1] != g[1]);
		CHECK(h[0] != z[0] || h[1] != z[1]);
	}
	CHECK(sluice_memstore_take(m, "abc", 3, &l, 1, 5, 1000000, NULL, &d) ==
	      1);
	CHECK(sluice_memstore_take(m, k16, 16, &l, 1, 5, 1000000, NULL, &d) ==
	      1);
	CHECK(sluice_memstore_take(m, "abc\0", 4, &l, 1, 5, 1000000, NULL,
				   &d) == 1);
	CHECK(sluice_memstore_take(m, "abc", 3, &l, 1, 1, 1000000, NULL, &d) ==
	      0);
	sluice_memstore_free(m);
}

/*
 * A memory store (AES for keys up to 16 bytes, SipHash for longer ones)
 * and a shared-memory store given the same calls on keys of 0 to 40
 * bytes, zero bytes included, answer alike, call after call: single
 * takes, takes of two limits, take_each, take_many, peeks, refunds,
 * resets, penalties and blocks.  Both have room for every bucket, so which
 * hash names a bucket cannot change a decision.  The shared file hashes as
 * the memory store (AES under other keys) or, no_aes, with SipHash for
 * every key (a file made where AES is not: two hashes, one answer).
 */
static void stores_agree(int no_aes)
{
	sluice_memstore_t *m = open_memstore(20000);
	sluice_shmstore_t *s = NULL;
	sluice_limit_t two[2] = {lim(5, "1/s"), lim(20, "10/min")};
	char path[128], err[256];
	uint8_t keys[300][40];
	size_t lens[300];
	uint64_t seed = 4242;
	int64_t now = INT64_C(1700000000000000);
	size_t i, j;
	int n;

	snprintf(path, sizeof(path), "/dev/shm/sluice-test-aeshash-%d",
		 getpid());
	unlink(path);
	sluice_shmstore__set_no_aes(no_aes);
	CHECK(sluice_shmstore_open(&s, path, 20000, err, sizeof(err)) == 0);
	sluice_shmstore__set_no_aes(0);
	CHECK(m && s);
	CHECK(strcmp(sluice_shmstore__hash(s),
		     have && !no_aes ? "aes" : "siphash") == 0);
	for (i = 0; i < 300; i++) {
		lens[i] = i % 41;
		for (j = 0; j < sizeof(keys[i]); j++) {
			uint64_t r = test_rand(&seed);
			keys[i][j] = r % 4 == 0 ? 0 : (uint8_t)(r >> 8);
		}
	}
	for (n = 0; n < 20000; n++) {
		uint64_t r = test_rand(&seed);
		size_t k = (size_t)(r % 300), nl = 1 + (r >> 9) % 2;
		const uint8_t *key = keys[k];
		size_t len = lens[k];
		uint64_t cost = (r >> 12) % 4;
		sluice_decision_t dm[2], ds[2], sm, ss;
		sluice_take_item_t im[2], is[2];
		int a = 0, b = 0;

		now += (int64_t)((r >> 16) % 200000);
		switch ((r >> 32) % 9) {
		case 0:
		case 1:
			a = sluice_memstore_take(m, key, len, two, nl, cost,
						 now, dm, &sm);
			b = sluice_shmstore_take(s, key, len, two, nl, cost,
						 now, ds, &ss);
			CHECK(same_decision(&sm, &ss));
			CHECK(same_decision(&dm[0], &ds[0]));
			break;
		case 2:
		case 3:
			memset(im, 0, sizeof(im));
			for (j = 0; j < 2; j++) {
				im[j].key = keys[(k + j * 7) % 300];
				im[j].keylen = lens[(k + j * 7) % 300];
				im[j].limits = two;
				im[j].nlimits = nl;
				im[j].cost = cost;
			}
			memcpy(is, im, sizeof(is));
			if ((r >> 40) % 2) {
				a = sluice_memstore_take_each(m, im, 2, now);
				b = sluice_shmstore_take_many(s, is, 1, now);
				b += sluice_shmstore_take_many(s, is + 1, 1,
							       now);
			} else {
				a = sluice_memstore_take_many(m, im, 2, now);
				b = sluice_shmstore_take_many(s, is, 2, now);
			}
			for (j = 0; j < 2; j++) {
				CHECK(im[j].allowed == is[j].allowed);
				CHECK(same_decision(&im[j].summary,
						    &is[j].summary));
			}
			break;
		case 4:
			a = sluice_memstore_peek(m, key, len, two, nl, cost,
						 now, dm, &sm);
			b = sluice_shmstore_peek(s, key, len, two, nl, cost,
						 now, ds, &ss);
			CHECK(same_decision(&sm, &ss));
			break;
		case 5:
			a = sluice_memstore_refund(m, key, len, two, nl, cost,
						   now);
			b = sluice_shmstore_refund(s, key, len, two, nl, cost,
						   now);
			break;
		case 6:
			if ((r >> 40) % 8 == 0) {
				a = sluice_memstore_reset(m, key, len, two, nl);
				b = sluice_shmstore_reset(s, key, len, two, nl);
			}
			break;
		case 7:
			a = sluice_memstore_penalize(m, key, len, two, nl, cost,
						     now);
			b = sluice_shmstore_penalize(s, key, len, two, nl, cost,
						     now);
			break;
		default:
			if ((r >> 40) % 8 == 0) {
				a = sluice_memstore_block(m, key, len, two, nl,
							  1000, now);
				b = sluice_shmstore_block(s, key, len, two, nl,
							  1000, now);
			}
		}
		CHECK(a == b);
	}
	sluice_memstore_free(m);
	sluice_shmstore_close(s);
	unlink(path);
}

static void test_stores_agree_on_every_length(void)
{
	stores_agree(0);
}

static void test_stores_agree_on_every_length_shared_siphash(void)
{
	stores_agree(1);
}

int main(void)
{
	init();
	if (!have)
		fprintf(stderr, "no AES-NI here: the stores keep SipHash; "
				"only that is checked\n");
	RUN(test_fips197_vector);
	RUN(test_pinned_vectors);
	RUN(test_every_length_is_its_block);
	RUN(test_reads_only_the_key);
	RUN(test_classes_apart);
	RUN(test_stores_agree_on_every_length);
	RUN(test_stores_agree_on_every_length_shared_siphash);
	TESTS_DONE();
}
