/*
 * test_memstore.c -- the embedded store: exact under concurrency, bounded
 * under a flood of keys, and lossless when it evicts full buckets.
 */
#include "check.h"
#include "sluice.h"
#include "stores.h"

#include <pthread.h>
#include <string.h>

static const int64_t T0 = 1764500000000000LL;

static sluice_limit_t limit(const char *cap, const char *rate)
{
	sluice_limit_t l;
	char err[256];

	if (sluice_limit_parse(&l, cap, rate, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	return l;
}

/* ------------------------------------------------------- concurrency */

typedef struct worker_s {
	sluice_memstore_t *store;
	const sluice_limit_t *limit;
	int id;
	uint64_t allowed;
} worker_t;

static void *hammer(void *arg)
{
	worker_t *w = arg;
	sluice_decision_t sum;
	int i;

	for (i = 0; i < 20000; i++) {
		/* Time moves forward 1 us per call within each thread; the
		 * threads interleave so the store also sees it go back. */
		int rc = sluice_memstore_take(w->store, "one-key", 7, w->limit,
					      1, 1, T0 + i, NULL, &sum);
		if (rc == 1)
			w->allowed++;
	}
	return NULL;
}

/* 8 threads, one key, capacity 1000 at 1/day: 160,000 attempts within 20
 * ms of simulated time can take exactly the 1000 tokens of the burst. */
static void test_eight_threads_one_key_exact(void)
{
	sluice_limit_t l = limit("1000", "1/day");
	sluice_memstore_t *m = open_memstore(1000);
	pthread_t th[8];
	worker_t w[8];
	uint64_t total = 0;
	int i;

	CHECK(m);
	for (i = 0; i < 8; i++) {
		w[i] = (worker_t){m, &l, i, 0};
		CHECK(pthread_create(&th[i], NULL, hammer, &w[i]) == 0);
	}
	for (i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		total += w[i].allowed;
	}
	sluice_memstore_free(m);
	CHECK_EQ_U64(total, 1000);
}

/* Several limits under concurrency: 8 threads on one key with a wide
 * (1000) and a narrow (20) limit.  Exactly 20 pass, and the wide limit is
 * charged for exactly those 20: every limit of a key is charged under one
 * lock, all or nothing. */
typedef struct multi_worker_s {
	sluice_memstore_t *store;
	const sluice_limit_t *limits;
	uint64_t allowed;
} multi_worker_t;

static void *hammer_multi(void *arg)
{
	multi_worker_t *w = arg;
	sluice_decision_t sum;
	int i;

	for (i = 0; i < 5000; i++)
		if (sluice_memstore_take(w->store, "user", 4, w->limits, 2, 1,
					 T0, NULL, &sum) == 1)
			w->allowed++;
	return NULL;
}

static void test_eight_threads_several_limits_all_or_nothing(void)
{
	sluice_limit_t l[2] = {limit("1000", "1000/h"), limit("20", "20/h")};
	sluice_memstore_t *m = open_memstore(1000);
	sluice_decision_t sum;
	pthread_t th[8];
	multi_worker_t w[8];
	uint64_t total = 0;
	int i;

	CHECK(m);
	for (i = 0; i < 8; i++) {
		w[i] = (multi_worker_t){m, l, 0};
		CHECK(pthread_create(&th[i], NULL, hammer_multi, &w[i]) == 0);
	}
	for (i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		total += w[i].allowed;
	}
	CHECK_EQ_U64(total, 20);
	CHECK(sluice_memstore_take(m, "user", 4, l, 1, 0, T0, NULL, &sum) == 1);
	CHECK_EQ_U64(sum.remaining, 980);
	sluice_memstore_free(m);
}

/* 10,000,000 distinct keys through a store bounded at 100,000: never more
 * than 100,000 resident, and every decision for a new key is "allowed". */
static void test_flood_of_keys_stays_bounded(void)
{
	sluice_limit_t l = limit("10", "1/min");
	sluice_memstore_t *m = open_memstore(100000);
	sluice_memstore_stats_t st;
	sluice_decision_t sum;
	uint64_t i, refused = 0;

	CHECK(m);
	for (i = 0; i < 10000000; i++) {
		char key[16];

		memcpy(key, &i, sizeof(i));
		memcpy(key + 8, "flooding", 8);
		if (sluice_memstore_take(m, key, sizeof(key), &l, 1, 1,
					 T0 + (int64_t)(i / 100), NULL,
					 &sum) != 1)
			refused++;
		if (i % 100000 == 0) {
			sluice_memstore_stats(m, &st);
			CHECK(st.keys <= 100000);
		}
	}
	sluice_memstore_stats(m, &st);
	sluice_memstore_free(m);
	CHECK_EQ_U64(refused, 0);
	CHECK(st.keys <= 100000);
	CHECK(st.keys >= 99000); /* the bound is used, not wasted */
	/* Within 0.1 s of simulated time nothing is full again (1/min, 9
	 * tokens short): every eviction lost a bucket and was counted. */
	CHECK(st.evicted_lossy + st.evicted_full >= 10000000 - 100000);
}

/* Keys that come back only after their bucket refilled: evicting them
 * loses nothing, so a small store decides exactly like an unbounded map. */
static void test_full_bucket_eviction_loses_nothing(void)
{
	enum { KEYS = 3000 };
	sluice_limit_t l = limit("5", "1/s");
	sluice_memstore_t *m = open_memstore(1000);
	static sluice_state_t ref[KEYS];
	sluice_memstore_stats_t st;
	uint64_t seed = 99, step;
	int64_t now = T0;

	CHECK(m);
	memset(ref, 0, sizeof(ref));
	for (step = 0; step < 300000; step++) {
		/* Recent keys are hot; cold keys return after > 5 s. */
		uint64_t r = test_rand(&seed);
		uint32_t k =
			(uint32_t)(r % 50 != 0 ? (step / 20) % KEYS : r % KEYS);
		uint64_t cost = 1 + (r >> 20) % 2;
		sluice_state_t next;
		sluice_decision_t want, got;
		char key[16];

		now += 50000; /* 50 ms per request */
		snprintf(key, sizeof(key), "user-%08u", k);
		sluice_eval(&l, ref[k], now, cost, &next, &want);
		ref[k] = next;
		CHECK(sluice_memstore_take(m, key, strlen(key), &l, 1, cost,
					   now, NULL, &got) == want.allowed);
		CHECK_EQ_U64(got.remaining, want.remaining);
		CHECK_EQ_U64(got.retry_after_us, want.retry_after_us);
	}
	sluice_memstore_stats(m, &st);
	sluice_memstore_free(m);
	CHECK(st.keys <= 1000);
	CHECK(st.evicted_full + st.expired > 0);
	CHECK_EQ_U64(st.evicted_lossy, 0);
}

/* Expired states are reclaimed by the traffic itself: after every bucket
 * has refilled, a stream of requests to one key frees the rest. */
static void test_expired_states_are_reclaimed_incrementally(void)
{
	sluice_limit_t l = limit("3", "1/s");
	sluice_memstore_t *m = open_memstore(100000);
	sluice_memstore_stats_t st;
	sluice_decision_t sum;
	int i;

	CHECK(m);
	for (i = 0; i < 5000; i++) {
		char key[32];
		snprintf(key, sizeof(key), "k%d", i);
		CHECK(sluice_memstore_take(m, key, strlen(key), &l, 1, 1, T0,
					   NULL, &sum) == 1);
	}
	sluice_memstore_stats(m, &st);
	CHECK_EQ_U64(st.keys, 5000);
	for (i = 0; i < 200000; i++)
		sluice_memstore_take(m, "hot", 3, &l, 1, 0, T0 + 2000000 + i,
				     NULL, &sum);
	sluice_memstore_stats(m, &st);
	sluice_memstore_free(m);
	CHECK(st.keys <= 1);
	CHECK(st.expired >= 5000);
}

/* Several limits on one key are charged all-or-nothing. */
static void test_multi_limit_all_or_nothing(void)
{
	sluice_limit_t l[2] = {limit("10", "1/s"), limit("3", "3/day")};
	sluice_memstore_t *m = open_memstore(10);
	sluice_decision_t d[2], sum;
	int i;

	CHECK(m);
	for (i = 0; i < 3; i++)
		CHECK(sluice_memstore_take(m, "u", 1, l, 2, 1, T0, d, &sum) ==
		      1);
	CHECK(sluice_memstore_take(m, "u", 1, l, 2, 1, T0, d, &sum) == 0);
	CHECK_EQ_U64(sum.limit, 3);
	/* Peek (cost 0 always passes): the burst limit still has 7, not 6. */
	CHECK(sluice_memstore_take(m, "u", 1, l, 2, 0, T0, d, &sum) == 1);
	CHECK_EQ_U64(d[0].remaining, 7);
	sluice_memstore_free(m);
}

/*
 * A bucket is the key and its limit, not the limit's position: a user
 * drained on tier "free" (one limit) who sends one request as tier "paid"
 * (another limit first, then free's) is still drained on free; a rule
 * that loses or gains a limit keeps every remaining limit's state; the
 * same limit twice is one bucket, charged once.
 */
static void test_switching_tiers_keeps_every_limit_state(void)
{
	sluice_limit_t free_[1] = {limit("5", "1/h")};
	sluice_limit_t paid[2] = {limit("100", "100/h"), limit("5", "1/h")};
	sluice_limit_t grown[2] = {limit("1000", "1000/day"),
				   limit("100", "100/h")};
	sluice_limit_t dup[2] = {limit("5", "1/h"), limit("5", "1/h")};
	sluice_memstore_t *m = open_memstore(1000);
	sluice_decision_t d[2], sum;
	int i;

	CHECK(m);
	for (i = 0; i < 5; i++)
		CHECK(sluice_memstore_take(m, "u", 1, free_, 1, 1, T0, d,
					   &sum) == 1);
	CHECK(sluice_memstore_take(m, "u", 1, free_, 1, 1, T0, d, &sum) == 0);
	CHECK(sluice_memstore_take(m, "u", 1, paid, 2, 1, T0, d, &sum) == 0);
	CHECK(sum.which == 1 && sum.limit == 5);
	CHECK(sluice_memstore_take(m, "u", 1, free_, 1, 1, T0, d, &sum) == 0);

	for (i = 0; i < 3; i++)
		CHECK(sluice_memstore_take(m, "r", 1, paid, 2, 1, T0, d,
					   &sum) == 1);
	CHECK(sluice_memstore_take(m, "r", 1, paid, 1, 1, T0, d, &sum) == 1);
	CHECK_EQ_U64(sum.remaining, 96);
	CHECK(sluice_memstore_take(m, "r", 1, grown, 2, 1, T0, d, &sum) == 1);
	CHECK(sum.which == 1);
	CHECK_EQ_U64(sum.remaining, 95);
	CHECK(sluice_memstore_take(m, "r", 1, free_, 1, 0, T0, d, &sum) == 1);
	CHECK_EQ_U64(sum.remaining, 2);

	CHECK(sluice_memstore_take(m, "d", 1, dup, 2, 1, T0, d, &sum) == 1);
	CHECK(sum.which == 0);
	CHECK_EQ_U64(sum.remaining, 4);
	CHECK(sluice_memstore_take(m, "d", 1, free_, 1, 0, T0, d, &sum) == 1);
	CHECK_EQ_U64(sum.remaining, 4);
	sluice_memstore_free(m);
}

/*
 * Eviction is no reset button: with max_keys 1,000, 20 users drain their
 * buckets, then a flood of 3,000 fresh keys (one request each, so in debt
 * by one token) fills the store twice over.  Eviction takes what loses
 * least, the fresh keys, and none of the 20 comes back full; what the
 * evictions forgave is counted.
 */
static void test_flood_of_fresh_keys_resets_no_drained_bucket(void)
{
	sluice_limit_t l = limit("10", "1/min");
	sluice_memstore_t *m = open_memstore(1000);
	sluice_memstore_stats_t st;
	sluice_decision_t sum;
	int64_t now = T0;
	char key[32];
	int u, i;

	CHECK(m);
	for (u = 0; u < 20; u++) {
		snprintf(key, sizeof(key), "user-%d", u);
		for (i = 0; i < 10; i++)
			CHECK(sluice_memstore_take(m, key, strlen(key), &l, 1,
						   1, now++, NULL, &sum) == 1);
	}
	for (i = 0; i < 3000; i++) {
		snprintf(key, sizeof(key), "fresh-%d", i);
		CHECK(sluice_memstore_take(m, key, strlen(key), &l, 1, 1, now++,
					   NULL, &sum) == 1);
	}
	for (u = 0; u < 20; u++) {
		snprintf(key, sizeof(key), "user-%d", u);
		CHECK(sluice_memstore_take(m, key, strlen(key), &l, 1, 1, now,
					   NULL, &sum) == 0);
	}
	sluice_memstore_stats(m, &st);
	sluice_memstore_free(m);
	CHECK(st.keys <= 1000);
	CHECK(st.evicted_lossy >= 2000);
	/* Each eviction forgave one fresh key's token: at most 60 s. */
	CHECK(st.evicted_debt_us > 0);
	CHECK(st.evicted_debt_us <= st.evicted_lossy * 60000000ull);
}

/* A rule bucket's key ("<rule>\x1f<identity>") and an ad-hoc key. */
static const char VICTIM[] = "check\x1f"
			     "10.0.0.1";
#define VICTIM_LEN (sizeof(VICTIM) - 1)

/*
 * Eviction is no reset button whatever rates callers choose (max_keys
 * 2,000): a client drains its rule bucket (5 at 5/min), then sends 6,000
 * ad-hoc takes on fresh keys with capacity 1 at 1/day, each a day of debt,
 * far deeper than the drained bucket's minute.  Ad-hoc buckets are evicted
 * among themselves, so the drained bucket stays drained; the ad-hoc flood
 * still holds the bound, and its evictions are counted.  A flood of fresh
 * rule keys after it still evicts fresh keys, not the drained bucket.
 */
static void test_flood_of_slow_adhoc_buckets_resets_no_rule_bucket(void)
{
	sluice_limit_t rule = limit("5", "5/min"), slow = limit("1", "1/day");
	sluice_memstore_t *m = open_memstore(2000);
	sluice_memstore_stats_t st;
	sluice_decision_t sum;
	int64_t now = T0;
	char key[40];
	int i, n;

	CHECK(m);
	for (i = 0; i < 6; i++)
		CHECK(sluice_memstore_take(m, VICTIM, VICTIM_LEN, &rule, 1, 1,
					   now++, NULL, &sum) == (i < 5));
	for (i = 0; i < 6000; i++) {
		n = snprintf(key, sizeof(key), "%cflood-%d", SLUICE_KEY_ADHOC,
			     i);
		CHECK(sluice_memstore_take(m, key, (size_t)n, &slow, 1, 1,
					   now++, NULL, &sum) == 1);
	}
	CHECK(sluice_memstore_take(m, VICTIM, VICTIM_LEN, &rule, 1, 1, now++,
				   NULL, &sum) == 0);
	sluice_memstore_stats(m, &st);
	CHECK(st.keys <= 2000);
	CHECK(st.evicted_lossy >= 4000);

	for (i = 0; i < 6000; i++) {
		n = snprintf(key, sizeof(key), "check%c10.1.%d.%d", 0x1f,
			     i / 250, i % 250);
		CHECK(sluice_memstore_take(m, key, (size_t)n, &rule, 1, 1,
					   now++, NULL, &sum) == 1);
	}
	CHECK(sluice_memstore_take(m, VICTIM, VICTIM_LEN, &rule, 1, 1, now++,
				   NULL, &sum) == 0);
	sluice_memstore_free(m);
}

/* A store smaller than one call's limits still holds its bound: what
 * does not fit is dropped (and counted), never kept beyond max_keys. */
static void test_bound_holds_below_one_calls_limits(void)
{
	sluice_limit_t l[3] = {limit("5", "1/s"), limit("50", "1/min"),
			       limit("500", "1/h")};
	sluice_memstore_t *m = open_memstore(2);
	sluice_memstore_stats_t st;
	sluice_decision_t sum;
	int i;

	CHECK(m);
	for (i = 0; i < 10; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		CHECK(sluice_memstore_take(m, key, strlen(key), l, 3, 1, T0,
					   NULL, &sum) == 1);
		sluice_memstore_stats(m, &st);
		CHECK(st.keys <= 2);
	}
	CHECK(st.evicted_lossy >= 10);
	sluice_memstore_free(m);
}

static void test_bad_arguments(void)
{
	sluice_limit_t l = limit("10", "1/s");
	sluice_memstore_t *m = open_memstore(10);
	static char big[70000];
	sluice_decision_t sum;

	CHECK(m);
	CHECK(open_memstore(0) == NULL);
	CHECK(sluice_memstore_take(m, "k", 1, &l, 0, 1, T0, NULL, &sum) ==
	      SLUICE_EINVAL);
	CHECK(sluice_memstore_take(m, "k", 1, &l, SLUICE_MAX_LIMITS + 1, 1, T0,
				   NULL, &sum) == SLUICE_EINVAL);
	/* A limit not built by sluice_limit_init(): refused, not divided by. */
	{
		sluice_limit_t bad = l;

		bad.rate.interval = 0;
		CHECK(sluice_memstore_take(m, "k", 1, &bad, 1, 1, T0, NULL,
					   &sum) == SLUICE_EINVAL);
		bad = l;
		bad.tau = 1;
		CHECK(sluice_memstore_take(m, "k", 1, &bad, 1, 1, T0, NULL,
					   &sum) == SLUICE_EINVAL);
	}
	/* Keys of any length, told apart by every byte. */
	memset(big, 'x', sizeof(big));
	CHECK(sluice_memstore_take(m, big, sizeof(big), &l, 1, 10, T0, NULL,
				   &sum) == 1);
	big[sizeof(big) - 1] = 'y';
	CHECK(sluice_memstore_take(m, big, sizeof(big), &l, 1, 10, T0, NULL,
				   &sum) == 1);
	CHECK(sluice_memstore_take(m, big, sizeof(big), &l, 1, 1, T0, NULL,
				   &sum) == 0);
	/* The empty key is a key like any other. */
	CHECK(sluice_memstore_take(m, "", 0, &l, 1, 1, T0, NULL, &sum) == 1);
	sluice_memstore_free(m);
}

/* ---------------------------------------------------- reset and refund */

static void test_reset_and_refund(void)
{
	sluice_memstore_t *m = open_memstore(1000);
	sluice_limit_t l[2] = {limit("10", "1/h"), limit("4", "1/day")};
	sluice_limit_t other = limit("3", "1/h");
	sluice_decision_t sum;
	int i;

	CHECK(m != NULL);
	for (i = 0; i < 4; i++)
		CHECK(sluice_memstore_take(m, "k", 1, l, 2, 1, T0, NULL,
					   &sum) == 1);
	CHECK(sluice_memstore_take(m, "k", 1, l, 2, 1, T0, NULL, &sum) == 0);
	CHECK(sluice_memstore_take(m, "k", 1, &other, 1, 3, T0, NULL, &sum) ==
	      1);
	/* Refund 3: both limits get 3 back. */
	CHECK(sluice_memstore_refund(m, "k", 1, l, 2, 3, T0) == 0);
	CHECK(sluice_memstore_take(m, "k", 1, l, 2, 0, T0, NULL, &sum) == 1);
	CHECK(sum.remaining == 3);
	/* Never beyond full. */
	CHECK(sluice_memstore_refund(m, "k", 1, l, 2, 1000, T0) == 0);
	CHECK(sluice_memstore_take(m, "k", 1, l, 2, 0, T0, NULL, &sum) == 1);
	CHECK(sum.remaining == 4);
	/* Reset: full, and only the buckets named. */
	for (i = 0; i < 4; i++)
		CHECK(sluice_memstore_take(m, "k", 1, l, 2, 1, T0, NULL,
					   &sum) == 1);
	CHECK(sluice_memstore_reset(m, "k", 1, l, 2) == 0);
	CHECK(sluice_memstore_take(m, "k", 1, l, 2, 4, T0, NULL, &sum) == 1);
	CHECK(sluice_memstore_take(m, "k", 1, &other, 1, 1, T0, NULL, &sum) ==
	      0);
	/* A key without state, and bad arguments. */
	CHECK(sluice_memstore_reset(m, "new", 3, l, 2) == 0);
	CHECK(sluice_memstore_refund(m, "new", 3, l, 2, 1, T0) == 0);
	CHECK(sluice_memstore_reset(m, "k", 1, l, 0) == SLUICE_EINVAL);
	CHECK(sluice_memstore_refund(m, NULL, 1, l, 1, 1, T0) == SLUICE_EINVAL);
	sluice_memstore_free(m);
}

/* The core refund is the inverse of a charge, capped at full. */
static void test_refund_inverts_a_charge(void)
{
	sluice_limit_t l = limit("7", "3/s");
	sluice_state_t s = 0, next, back;
	sluice_decision_t d;

	sluice_eval(&l, s, T0, 5, &next, &d);
	CHECK(d.allowed && d.remaining == 2);
	back = sluice_refund(&l, next, T0, 2);
	sluice_eval(&l, back, T0, 0, &s, &d);
	CHECK(d.remaining == 4);
	CHECK(sluice_refund(&l, next, T0, 5) == 0);
	CHECK(sluice_refund(&l, next, T0, UINT64_MAX) == 0);
	CHECK(sluice_refund(&l, 0, T0, 1) == 0);
}

/* peek decides a cost without charging; penalize charges into debt;
 * block lets nothing pass for a while; each limit once. */
static void test_peek_penalize_block(void)
{
	sluice_memstore_t *m = open_memstore(1000);
	sluice_limit_t l[3] = {limit("3", "1/s"), limit("10", "10/min"),
			       limit("3", "1/s")};
	sluice_decision_t sum;
	int i;

	CHECK(m != NULL);
	CHECK(sluice_memstore_peek(m, "k", 1, l, 3, 1, T0, NULL, &sum) == 1);
	CHECK(sum.remaining == 2);
	for (i = 0; i < 3; i++)
		CHECK(sluice_memstore_take(m, "k", 1, l, 3, 1, T0, NULL,
					   &sum) == 1);
	/* Drained: the peek of one token says no, with the wait. */
	CHECK(sluice_memstore_peek(m, "k", 1, l, 3, 1, T0, NULL, &sum) == 0);
	CHECK(sum.retry_after_us == 1000000);
	CHECK(sluice_memstore_peek(m, "k", 1, l, 3, 1, T0, NULL, &sum) == 0);
	/* Two tokens of debt on the first limit (the third is the same
	 * bucket: charged once): three seconds until one passes. */
	CHECK(sluice_memstore_penalize(m, "k", 1, l, 3, 2, T0) == 0);
	CHECK(sluice_memstore_peek(m, "k", 1, l, 3, 1, T0, NULL, &sum) == 0);
	CHECK(sum.retry_after_us == 3000000);
	CHECK(sluice_memstore_take(m, "k", 1, l, 3, 1, T0 + 2999999, NULL,
				   &sum) == 0);
	CHECK(sluice_memstore_take(m, "k", 1, l, 3, 1, T0 + 3000000, NULL,
				   &sum) == 1);
	/* A block on a fresh key: exactly ms, on every limit. */
	CHECK(sluice_memstore_block(m, "b", 1, l, 3, 90000, T0) == 0);
	CHECK(sluice_memstore_peek(m, "b", 1, l, 3, 1, T0, NULL, &sum) == 0);
	CHECK(sum.retry_after_us == 90000000);
	CHECK(sluice_memstore_take(m, "b", 1, l, 3, 1, T0 + 90000000, NULL,
				   &sum) == 1);
	CHECK(sluice_memstore_reset(m, "b", 1, l, 3) == 0);
	CHECK(sluice_memstore_peek(m, "b", 1, l, 3, 3, T0, NULL, &sum) == 1);
	CHECK(sluice_memstore_penalize(m, "k", 1, l, 0, 1, T0) ==
	      SLUICE_EINVAL);
	CHECK(sluice_memstore_block(m, NULL, 1, l, 1, 1, T0) == SLUICE_EINVAL);
	CHECK(sluice_memstore_peek(m, "k", 1, l, 0, 1, T0, NULL, &sum) ==
	      SLUICE_EINVAL);
	sluice_memstore_free(m);
}

/* Two threads fill a store with 240,000 keys, each taking its own cost,
 * while every shard's table doubles several times (the larger arrays side
 * by side in the store's arena): afterwards each key holds exactly what it
 * took, and nothing was evicted or lost. */
typedef struct filler_s {
	sluice_memstore_t *store;
	const sluice_limit_t *limit;
	uint64_t first, n;
	int failed;
} filler_t;

static void *fill(void *arg)
{
	filler_t *f = arg;
	sluice_decision_t sum;
	uint64_t i;

	for (i = f->first; i < f->first + f->n; i++)
		if (sluice_memstore_take(f->store, &i, sizeof(i), f->limit, 1,
					 1 + i % 7, T0, NULL, &sum) != 1)
			f->failed = 1;
	return NULL;
}

static void test_keys_stay_exact_as_tables_grow(void)
{
	sluice_limit_t l = limit("10", "1/min");
	sluice_memstore_t *m = open_memstore(300000);
	sluice_memstore_stats_t st;
	sluice_decision_t sum;
	filler_t f[2];
	pthread_t th[2];
	uint64_t i, wrong = 0;
	int t;

	CHECK(m);
	for (t = 0; t < 2; t++) {
		f[t].store = m;
		f[t].limit = &l;
		f[t].first = (uint64_t)t * 120000;
		f[t].n = 120000;
		f[t].failed = 0;
		CHECK(pthread_create(&th[t], NULL, fill, &f[t]) == 0);
	}
	for (t = 0; t < 2; t++) {
		pthread_join(th[t], NULL);
		CHECK(!f[t].failed);
	}
	for (i = 0; i < 240000; i++) {
		CHECK(sluice_memstore_peek(m, &i, sizeof(i), &l, 1, 1, T0, NULL,
					   &sum) >= 0);
		/* What a take of 1 more would leave. */
		wrong += sum.remaining != 10 - (1 + i % 7) - 1;
	}
	sluice_memstore_stats(m, &st);
	sluice_memstore_free(m);
	CHECK_EQ_U64(wrong, 0);
	CHECK_EQ_U64(st.keys, 240000);
	CHECK_EQ_U64(st.evicted_full + st.evicted_lossy + st.expired, 0);
}

int main(void)
{
	RUN(test_eight_threads_one_key_exact);
	RUN(test_eight_threads_several_limits_all_or_nothing);
	RUN(test_flood_of_keys_stays_bounded);
	RUN(test_full_bucket_eviction_loses_nothing);
	RUN(test_expired_states_are_reclaimed_incrementally);
	RUN(test_multi_limit_all_or_nothing);
	RUN(test_switching_tiers_keeps_every_limit_state);
	RUN(test_flood_of_fresh_keys_resets_no_drained_bucket);
	RUN(test_flood_of_slow_adhoc_buckets_resets_no_rule_bucket);
	RUN(test_bound_holds_below_one_calls_limits);
	RUN(test_bad_arguments);
	RUN(test_reset_and_refund);
	RUN(test_refund_inverts_a_charge);
	RUN(test_peek_penalize_block);
	RUN(test_keys_stay_exact_as_tables_grow);
	TESTS_DONE();
}
