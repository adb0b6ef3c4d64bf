/*
 * test_store_carry.c -- a changed limit keeps each key's usage on the
 * local stores (memory and shared memory): the store's carry
 * (sluice_memstore_carry(), sluice_shmstore_carry()) moves a key's state
 * from the limits it had to the new one, as the core's sluice_carry()
 * computes it, once.  Each scenario runs on both stores.
 */
#include "check.h"
#include "sluice.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define T0 INT64_C(1764500000000000)
#define H  INT64_C(3600000000)

/* One store of either kind behind the same few calls. */
typedef struct store_s {
	sluice_memstore_t *mem;
	sluice_shmstore_t *shm;
	char path[128];
} store_t;

static void store_open(store_t *st, int shared)
{
	char err[256];

	memset(st, 0, sizeof(*st));
	if (!shared) {
		CHECK(sluice_memstore_open(&st->mem, 1000, err, sizeof(err)) ==
		      0);
		return;
	}
	snprintf(st->path, sizeof(st->path), "/dev/shm/sluice-test-%d-carry",
		 (int)getpid());
	unlink(st->path);
	if (sluice_shmstore_open(&st->shm, st->path, 1000, err, sizeof(err)) !=
	    0) {
		fprintf(stderr, "%s\n", err);
		CHECK(0);
	}
}

static void store_close(store_t *st)
{
	sluice_memstore_free(st->mem);
	if (st->shm) {
		sluice_shmstore_close(st->shm);
		unlink(st->path);
	}
}

static int take(store_t *st, const char *key, const sluice_limit_t *l,
		uint64_t cost, int64_t now, sluice_decision_t *d)
{
	return st->mem ? sluice_memstore_take(st->mem, key, strlen(key), l, 1,
					      cost, now, NULL, d)
		       : sluice_shmstore_take(st->shm, key, strlen(key), l, 1,
					      cost, now, NULL, d);
}

static int carry(store_t *st, const char *key, const sluice_limit_t *to,
		 const sluice_limit_t *from, size_t nfrom, int64_t now)
{
	return st->mem ? sluice_memstore_carry(st->mem, key, strlen(key), to,
					       from, nfrom, now)
		       : sluice_shmstore_carry(st->shm, key, strlen(key), to,
					       from, nfrom, now);
}

static sluice_limit_t lim(const char *cap, const char *rate)
{
	sluice_limit_t l;

	CHECK(sluice_limit_parse(&l, cap, rate, NULL, 0) == 0);
	return l;
}

static void drain(store_t *st, const char *key, const sluice_limit_t *l,
		  int64_t now)
{
	sluice_decision_t d;

	while (take(st, key, l, 1, now, &d) == 1)
		;
	CHECK(d.remaining == 0 && !d.allowed);
}

/* The operator's story of the issue: drained on 5/h, lowered to 3: still
 * drained, the retry one token of the new limit; then the rate changed to
 * 2/h: still drained, retry half an hour. */
static void drained_key_lowered_stays_drained(int shared)
{
	sluice_limit_t five = lim("5", "1/h"), three = lim("3", "1/h"),
		       three2 = lim("3", "2/h");
	sluice_decision_t d;
	store_t st;

	store_open(&st, shared);
	drain(&st,
	      "r\x1f"
	      "abuser",
	      &five, T0);
	CHECK(carry(&st,
		    "r\x1f"
		    "abuser",
		    &three, &five, 1, T0 + 1) == 1);
	CHECK(take(&st,
		   "r\x1f"
		   "abuser",
		   &three, 1, T0 + 1, &d) == 0);
	CHECK_EQ_U64(d.remaining, 0);
	CHECK_EQ_U64(d.retry_after_us, (uint64_t)H);
	/* Carried once: the old bucket is gone, a second carry finds the
	 * new one's state and changes nothing. */
	CHECK(carry(&st,
		    "r\x1f"
		    "abuser",
		    &three, &five, 1, T0 + 2) == 0);
	CHECK(take(&st,
		   "r\x1f"
		   "abuser",
		   &three, 1, T0 + 2, &d) == 0);
	/* The rate changes too (the list holds both earlier limits). */
	{
		sluice_limit_t from[2] = {three, five};

		CHECK(carry(&st,
			    "r\x1f"
			    "abuser",
			    &three2, from, 2, T0 + 3) == 1);
	}
	CHECK(take(&st,
		   "r\x1f"
		   "abuser",
		   &three2, 1, T0 + 3, &d) == 0);
	CHECK_EQ_U64(d.retry_after_us, (uint64_t)(H / 2));
	store_close(&st);
}

/* Raised: allowed by the difference, no more. */
static void raised_limit_allows_the_difference(int shared)
{
	sluice_limit_t five = lim("5", "1/h"), eight = lim("8", "1/h");
	sluice_decision_t d;
	store_t st;
	int i;

	store_open(&st, shared);
	drain(&st, "r\x1fu", &five, T0);
	CHECK(carry(&st, "r\x1fu", &eight, &five, 1, T0) == 1);
	for (i = 0; i < 3; i++)
		CHECK(take(&st, "r\x1fu", &eight, 1, T0, &d) == 1);
	CHECK(take(&st, "r\x1fu", &eight, 1, T0, &d) == 0);
	store_close(&st);
}

/* Half used across a rate change: 5 of 10 used at 1/s are 5 of 10 used
 * at 1/min; another key (never charged) starts full. */
static void half_used_across_rate_change(int shared)
{
	sluice_limit_t per_s = lim("10", "1/s"), per_m = lim("10", "1/min");
	sluice_decision_t d;
	store_t st;
	int i;

	store_open(&st, shared);
	for (i = 0; i < 5; i++)
		CHECK(take(&st, "r\x1fh", &per_s, 1, T0, &d) == 1);
	CHECK(carry(&st, "r\x1fh", &per_m, &per_s, 1, T0) == 1);
	CHECK(take(&st, "r\x1fh", &per_m, 0, T0, &d) == 1);
	CHECK_EQ_U64(d.remaining, 5);
	CHECK_EQ_U64(d.reset_after_us, 5 * UINT64_C(60000000));
	CHECK(carry(&st, "r\x1fother", &per_m, &per_s, 1, T0) == 0);
	CHECK(take(&st, "r\x1fother", &per_m, 0, T0, &d) == 1);
	CHECK_EQ_U64(d.remaining, 10);
	store_close(&st);
}

/* A change back (A -> B -> A) finds no stale A: the usage charged under
 * B is what comes back, and a bucket that was full carries nothing. */
static void change_back_counts_usage_once(int shared)
{
	sluice_limit_t a = lim("10", "1/min"), b = lim("4", "1/min");
	sluice_decision_t d;
	store_t st;
	int i;

	store_open(&st, shared);
	for (i = 0; i < 2; i++)
		CHECK(take(&st, "r\x1fz", &a, 1, T0, &d) == 1);
	CHECK(carry(&st, "r\x1fz", &b, &a, 1, T0) == 1);
	CHECK(take(&st, "r\x1fz", &b, 1, T0, &d) == 1);
	CHECK_EQ_U64(d.remaining, 1); /* 2 carried + 1 of 4 */
	CHECK(carry(&st, "r\x1fz", &a, &b, 1, T0) == 1);
	CHECK(take(&st, "r\x1fz", &a, 0, T0, &d) == 1);
	CHECK_EQ_U64(d.remaining, 7);
	/* Much later both are full: nothing to carry, a full bucket. */
	CHECK(carry(&st, "r\x1fz", &b, &a, 1, T0 + H) == 0);
	CHECK(take(&st, "r\x1fz", &b, 0, T0 + H, &d) == 1);
	CHECK_EQ_U64(d.remaining, 4);
	store_close(&st);
}

/* Random takes with random changes, through the store: every decision as
 * the core's own (sluice_carry() then sluice_eval()) on one state. */
static void store_matches_core(int shared)
{
	sluice_limit_t ls[5];
	uint64_t seed = 99;
	sluice_state_t s = 0;
	size_t cur = 0, step;
	int64_t now = T0;
	store_t st;

	ls[0] = lim("10", "2/s");
	ls[1] = lim("4", "2/s");
	ls[2] = lim("30", "1/s");
	ls[3] = lim("6", "1/3s");
	ls[4] = lim("100", "50/min");
	store_open(&st, shared);
	for (step = 0; step < 20000; step++) {
		uint64_t r = test_rand(&seed), cost = 1 + (r >> 20) % 3;
		sluice_decision_t d, want;
		sluice_state_t next;
		int got;

		now += (int64_t)(test_rand(&seed) % 400000);
		if (r % 16 == 0) {
			size_t to = (size_t)(test_rand(&seed) % 5);

			CHECK(carry(&st, "r\x1fm", &ls[to], &ls[cur], 1, now) >=
			      0);
			s = sluice_carry(&ls[cur], s, &ls[to], now);
			cur = to;
		}
		got = take(&st, "r\x1fm", &ls[cur], cost, now, &d);
		sluice_eval(&ls[cur], s, now, cost, &next, &want);
		s = next;
		CHECK(got == want.allowed);
		CHECK_EQ_U64(d.remaining, want.remaining);
		CHECK_EQ_U64(d.retry_after_us, want.retry_after_us);
		CHECK_EQ_U64(d.reset_after_us, want.reset_after_us);
	}
	store_close(&st);
}

static void bad_arguments_are_refused(int shared)
{
	sluice_limit_t a = lim("10", "1/min"), bad;
	store_t st;

	memset(&bad, 0, sizeof(bad));
	store_open(&st, shared);
	CHECK(carry(&st, "k", &bad, &a, 1, T0) == SLUICE_EINVAL);
	CHECK(carry(&st, "k", &a, &bad, 1, T0) == SLUICE_EINVAL);
	CHECK(carry(&st, "k", &a, NULL, 1, T0) == SLUICE_EINVAL);
	CHECK(carry(&st, "k", &a, &a, SLUICE_MAX_LIMITS + 1, T0) ==
	      SLUICE_EINVAL);
	CHECK(carry(&st, "k", &a, NULL, 0, T0) == 0);
	store_close(&st);
}

#define BOTH(fn)                                                               \
	static void test_memory_##fn(void)                                     \
	{                                                                      \
		fn(0);                                                         \
	}                                                                      \
	static void test_shared_##fn(void)                                     \
	{                                                                      \
		fn(1);                                                         \
	}

BOTH(drained_key_lowered_stays_drained)
BOTH(raised_limit_allows_the_difference)
BOTH(half_used_across_rate_change)
BOTH(change_back_counts_usage_once)
BOTH(store_matches_core)
BOTH(bad_arguments_are_refused)

int main(void)
{
	RUN(test_memory_drained_key_lowered_stays_drained);
	RUN(test_shared_drained_key_lowered_stays_drained);
	RUN(test_memory_raised_limit_allows_the_difference);
	RUN(test_shared_raised_limit_allows_the_difference);
	RUN(test_memory_half_used_across_rate_change);
	RUN(test_shared_half_used_across_rate_change);
	RUN(test_memory_change_back_counts_usage_once);
	RUN(test_shared_change_back_counts_usage_once);
	RUN(test_memory_store_matches_core);
	RUN(test_shared_store_matches_core);
	RUN(test_memory_bad_arguments_are_refused);
	RUN(test_shared_bad_arguments_are_refused);
	TESTS_DONE();
}
