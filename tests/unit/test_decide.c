/*
 * test_decide.c -- the decision function against an independent model.
 *
 * The model below is the token bucket as textbooks state it: a token level
 * and a last-update time, refilled by elapsed x rate and capped at capacity.
 * It keeps the level exactly as a rational with denominator `period` (so
 * level*period is an integer) and shares no code with src/core/decide.c,
 * which stores a theoretical arrival time instead.
 */
#include "check.h"
#include "sluice.h"

#include <string.h>

/* ---------------------------------------------------------------- model */

typedef struct model_s {
	uint64_t capacity;
	uint64_t tokens; /* refill: `tokens` every `period` microseconds */
	uint64_t period;
	unsigned __int128 level; /* tokens x period */
	int64_t last;
} model_t;

typedef struct answer_s {
	int allowed;
	uint64_t remaining, retry_after_us, reset_after_us;
} answer_t;

static uint64_t div_ceil(unsigned __int128 a, uint64_t b)
{
	return (uint64_t)((a + b - 1) / b);
}

static void model_init(model_t *m, uint64_t capacity, uint64_t tokens,
		       uint64_t period, int64_t now)
{
	m->capacity = capacity;
	m->tokens = tokens;
	m->period = period;
	m->level = (unsigned __int128)capacity * period;
	m->last = now;
}

static answer_t model_take(model_t *m, int64_t now, uint64_t cost)
{
	unsigned __int128 full = (unsigned __int128)m->capacity * m->period;
	unsigned __int128 need = (unsigned __int128)cost * m->period;
	answer_t a;

	if (now > m->last) {
		m->level += (unsigned __int128)(now - m->last) * m->tokens;
		if (m->level > full)
			m->level = full;
		m->last = now;
	}
	a.allowed = cost <= m->capacity && m->level >= need;
	if (a.allowed)
		m->level -= need;
	a.remaining = (uint64_t)(m->level / m->period);
	/* Waiting time for (need - level)/period tokens at tokens/period per
	 * microsecond is (need - level)/tokens microseconds. */
	a.retry_after_us = a.allowed ? 0
			   : cost > m->capacity
				   ? UINT64_MAX
				   : div_ceil(need - m->level, m->tokens);
	a.reset_after_us = div_ceil(full - m->level, m->tokens);
	return a;
}

/* ---------------------------------------------------------------- tests */

typedef struct policy_s {
	const char *rate;
	uint64_t tokens, period; /* the same rate, written by hand */
	uint64_t capacity;
} policy_t;

static const policy_t policies[] = {
	{"2/s", 2, 1000000, 100},	 {"1/3s", 1, 3000000, 5},
	{"7/day", 7, 86400000000ULL, 7}, {"1000000/s", 1000000, 1000000, 1000},
	{"0.5/s", 1, 2000000, 10},	 {"50/min", 50, 60000000, 50},
	{"3/s", 3, 1000000, 4},
};

static void limit_of(const policy_t *p, sluice_limit_t *l)
{
	char err[256];
	char cap[32];

	snprintf(cap, sizeof(cap), "%llu", (unsigned long long)p->capacity);
	if (sluice_limit_parse(l, cap, p->rate, err, sizeof(err)) != 0) {
		fprintf(stderr, "bad policy %s: %s\n", p->rate, err);
		abort();
	}
}

/* >= 1,000,000 random (advance, cost) steps across rates: identical
 * allowed / remaining / retry_after / reset_after. */
static void test_matches_exact_model(void)
{
	uint64_t seed = 42;
	size_t pi, step, steps = 0;

	for (pi = 0; pi < sizeof(policies) / sizeof(policies[0]); pi++) {
		const policy_t *p = &policies[pi];
		uint64_t interval = p->period / p->tokens + 1;
		sluice_limit_t l;
		sluice_state_t s = 0;
		model_t m;
		int64_t now = 1764500000000000LL + (int64_t)pi;

		limit_of(p, &l);
		model_init(&m, p->capacity, p->tokens, p->period, now);
		for (step = 0; step < 150000; step++, steps++) {
			uint64_t r = test_rand(&seed);
			uint64_t cost;
			sluice_state_t next;
			sluice_decision_t d;
			answer_t a;

			/* Mostly short gaps (bursts), sometimes long ones. */
			switch (r % 8) {
			case 0:
				now += (int64_t)(test_rand(&seed) %
						 (interval * p->capacity * 2));
				break;
			case 1:
			case 2:
				now += (int64_t)(test_rand(&seed) %
						 (interval * 2));
				break;
			default:
				now += (int64_t)(test_rand(&seed) %
						 (interval / 4 + 2));
				break;
			}
			cost = (r >> 8) % 16 == 0   ? p->capacity + 1
			       : (r >> 8) % 16 == 1 ? 0
						    : 1 + (r >> 16) % 3;
			sluice_eval(&l, s, now, cost, &next, &d);
			a = model_take(&m, now, cost);
			if (d.allowed != a.allowed ||
			    d.remaining != a.remaining ||
			    d.retry_after_us != a.retry_after_us ||
			    d.reset_after_us != a.reset_after_us) {
				fprintf(stderr,
					"%s step %zu cost %llu: got "
					"%d/%llu/%llu/"
					"%llu want %d/%llu/%llu/%llu\n",
					p->rate, step, (unsigned long long)cost,
					d.allowed,
					(unsigned long long)d.remaining,
					(unsigned long long)d.retry_after_us,
					(unsigned long long)d.reset_after_us,
					a.allowed,
					(unsigned long long)a.remaining,
					(unsigned long long)a.retry_after_us,
					(unsigned long long)a.reset_after_us);
				CHECK(0);
			}
			CHECK(d.never == (cost > p->capacity));
			s = next;
		}
	}
	CHECK(steps >= 1000000);
}

/*
 * The model's side of a limit change (sluice_carry()'s rule, written
 * from its documentation in the model's own terms): the tokens used
 * (capacity - level) stay used under the new limit, at most its capacity.
 * With the same rate they are kept exactly; with another rate they are
 * counted whole, a part of a token counting as one.
 */
static void model_change(model_t *m, int64_t now, uint64_t capacity,
			 uint64_t tokens, uint64_t period)
{
	unsigned __int128 full = (unsigned __int128)m->capacity * m->period;
	unsigned __int128 used, nfull;

	model_take(m, now, 0); /* refill to now */
	used = full - m->level;
	if (tokens == m->tokens && period == m->period) {
		nfull = (unsigned __int128)capacity * period;
		m->level = used >= nfull ? 0 : nfull - used;
	} else {
		unsigned __int128 whole = (used + m->period - 1) / m->period;

		if (whole > capacity)
			whole = capacity;
		m->level = (capacity - (uint64_t)whole) *
			   (unsigned __int128)period;
	}
	m->capacity = capacity;
	m->tokens = tokens;
	m->period = period;
}

/* Limits an operator moves between: the same rate at other capacities
 * (the shortfall kept exactly) and other rates (whole tokens). */
static const policy_t changes[] = {
	{"2/s", 2, 1000000, 100},    {"2/s", 2, 1000000, 10},
	{"2/s", 2, 1000000, 300},    {"50/min", 50, 60000000, 50},
	{"50/min", 50, 60000000, 5}, {"0.5/s", 1, 2000000, 10},
	{"1/3s", 1, 3000000, 5},     {"7/day", 7, 86400000000ULL, 7},
	{"3/s", 3, 1000000, 4},
};

/* Random takes with the limit changed at random instants (the store's
 * carry applied each time, sluice_carry()): every decision as the model's,
 * which applies the documented carry rule. */
static void test_limit_changes_match_model(void)
{
	const size_t nc = sizeof(changes) / sizeof(changes[0]);
	uint64_t seed = 2026;
	size_t round, step, nchanges = 0;

	for (round = 0; round < 40; round++) {
		const policy_t *p = &changes[round % nc];
		sluice_limit_t l;
		sluice_state_t s = 0;
		model_t m;
		int64_t now = 1764500000000000LL + (int64_t)round;

		limit_of(p, &l);
		model_init(&m, p->capacity, p->tokens, p->period, now);
		for (step = 0; step < 5000; step++) {
			uint64_t r = test_rand(&seed);
			uint64_t interval = p->period / p->tokens + 1, cost;
			sluice_state_t next;
			sluice_decision_t d;
			answer_t a;

			now += (int64_t)(r % 8 == 0
						 ? test_rand(&seed) %
							   (interval * 8)
						 : test_rand(&seed) %
							   (interval / 2 + 2));
			if ((r >> 4) % 32 == 0) {
				sluice_limit_t to;

				p = &changes[test_rand(&seed) % nc];
				limit_of(p, &to);
				s = sluice_carry(&l, s, &to, now);
				l = to;
				model_change(&m, now, p->capacity, p->tokens,
					     p->period);
				nchanges++;
			}
			cost = (r >> 12) % 16 == 0 ? 0 : 1 + (r >> 16) % 3;
			sluice_eval(&l, s, now, cost, &next, &d);
			a = model_take(&m, now, cost);
			if (d.allowed != a.allowed ||
			    d.remaining != a.remaining ||
			    d.retry_after_us != a.retry_after_us ||
			    d.reset_after_us != a.reset_after_us) {
				fprintf(stderr,
					"round %zu step %zu (%s cap %llu): got "
					"%d/%llu/%llu/%llu want %d/%llu/%llu/"
					"%llu\n",
					round, step, p->rate,
					(unsigned long long)p->capacity,
					d.allowed,
					(unsigned long long)d.remaining,
					(unsigned long long)d.retry_after_us,
					(unsigned long long)d.reset_after_us,
					a.allowed,
					(unsigned long long)a.remaining,
					(unsigned long long)a.retry_after_us,
					(unsigned long long)a.reset_after_us);
				CHECK(0);
			}
			s = next;
		}
	}
	CHECK(nchanges >= 5000);
}

/* The carry rule at the instants an operator meets it. */
static void test_carry_drained_lowered_raised_half_used(void)
{
	const int64_t T = 1764500000000000LL, H = 3600000000LL;
	sluice_limit_t five, three, eight, two_h, ten_s, ten_m;
	sluice_state_t s = 0, next, c;
	sluice_decision_t d;
	int i;

	CHECK(sluice_limit_parse(&five, "5", "1/h", NULL, 0) == 0);
	CHECK(sluice_limit_parse(&three, "3", "1/h", NULL, 0) == 0);
	CHECK(sluice_limit_parse(&eight, "8", "1/h", NULL, 0) == 0);
	CHECK(sluice_limit_parse(&two_h, "5", "2/h", NULL, 0) == 0);
	for (i = 0; i < 5; i++) {
		sluice_eval(&five, s, T, 1, &next, &d);
		CHECK(d.allowed);
		s = next;
	}
	/* Drained, lowered: still drained, one token of the new limit away
	 * (1/h), not the old bucket's time. */
	c = sluice_carry(&five, s, &three, T + 1);
	sluice_eval(&three, c, T + 1, 1, &next, &d);
	CHECK(!d.allowed);
	CHECK_EQ_U64(d.retry_after_us, (uint64_t)H);
	CHECK_EQ_U64(d.reset_after_us, (uint64_t)(3 * H));
	/* Raised: allowed by the difference (8 - 5), then refused. */
	c = sluice_carry(&five, s, &eight, T + 1);
	for (i = 0; i < 3; i++) {
		sluice_eval(&eight, c, T + 1, 1, &next, &d);
		CHECK(d.allowed);
		c = next;
	}
	sluice_eval(&eight, c, T + 1, 1, &next, &d);
	CHECK(!d.allowed);
	/* A rate change keeps the count: 5 used stay 5 used, refilled at
	 * 2/h (a token every 30 minutes). */
	c = sluice_carry(&five, s, &two_h, T + 1);
	sluice_eval(&two_h, c, T + 1, 1, &next, &d);
	CHECK(!d.allowed);
	CHECK_EQ_U64(d.retry_after_us, (uint64_t)(H / 2));
	/* Half used across a rate change: 5 of 10 used at 1/s are 5 of 10
	 * used at 1/min. */
	CHECK(sluice_limit_parse(&ten_s, "10", "1/s", NULL, 0) == 0);
	CHECK(sluice_limit_parse(&ten_m, "10", "1/min", NULL, 0) == 0);
	s = 0;
	for (i = 0; i < 5; i++) {
		sluice_eval(&ten_s, s, T, 1, &next, &d);
		s = next;
	}
	c = sluice_carry(&ten_s, s, &ten_m, T);
	sluice_eval(&ten_m, c, T, 0, &next, &d);
	CHECK_EQ_U64(d.remaining, 5);
	CHECK_EQ_U64(d.reset_after_us, 5 * 60000000ULL);
	/* Full carries nothing; a debt is cut at the new capacity. */
	CHECK(sluice_carry(&ten_s, s, &ten_m, T + 6000000) == 0);
	s = sluice_penalize(&five, 0, T, 50);
	c = sluice_carry(&five, s, &three, T);
	sluice_eval(&three, c, T, 0, &next, &d);
	CHECK_EQ_U64(d.reset_after_us, (uint64_t)(3 * H));
}

/* For every interval [t0, t1] of a random trace, the accepted cost is at
 * most capacity + rate x (t1 - t0). */
static void test_never_more_than_capacity_plus_rate(void)
{
	enum { N = 3000 };
	static int64_t t[N];
	static uint64_t accepted[N + 1]; /* prefix sums */
	uint64_t seed = 7;
	size_t pi, i, j;

	for (pi = 0; pi < sizeof(policies) / sizeof(policies[0]); pi++) {
		const policy_t *p = &policies[pi];
		sluice_limit_t l;
		sluice_state_t s = 0;
		int64_t now = 1000000000;
		uint64_t gap = p->period / p->tokens / 2 + 1;

		limit_of(p, &l);
		accepted[0] = 0;
		for (i = 0; i < N; i++) {
			uint64_t cost = 1 + test_rand(&seed) % 3;
			sluice_state_t next;
			sluice_decision_t d;

			now += (int64_t)(test_rand(&seed) % gap);
			sluice_eval(&l, s, now, cost, &next, &d);
			s = next;
			t[i] = now;
			accepted[i + 1] = accepted[i] + (d.allowed ? cost : 0);
		}
		for (i = 0; i < N; i++)
			for (j = i; j < N; j++) {
				/* (sum - C) * period <= (t_j - t_i) * tokens */
				__int128 sum = (__int128)(accepted[j + 1] -
							  accepted[i]);
				__int128 lhs = (sum - (__int128)p->capacity) *
					       (__int128)p->period;
				__int128 rhs = (__int128)(t[j] - t[i]) *
					       (__int128)p->tokens;
				CHECK(lhs <= rhs);
			}
	}
}

/* 30 simulated days at one token per 3 s, a request every second: the
 * bucket starts full (10) and every refilled token is taken by the next
 * request, so allowed = 10 + floor(2591999 / 3) = 864009.  No drift. */
static void test_thirty_days_no_drift(void)
{
	sluice_limit_t l;
	sluice_state_t s = 0, next;
	sluice_decision_t d;
	char err[128];
	int64_t t0 = 1764500000000000LL, sec;
	uint64_t allowed = 0;

	CHECK(sluice_limit_parse(&l, "10", "1/3s", err, sizeof(err)) == 0);
	for (sec = 0; sec < 30 * 86400; sec++) {
		sluice_eval(&l, s, t0 + sec * 1000000, 1, &next, &d);
		s = next;
		allowed += (uint64_t)d.allowed;
	}
	CHECK_EQ_U64(allowed, 864009);
}

/* The classic scenario: capacity 100, 2/s, 1000 requests evenly over one
 * second from a full bucket (one every millisecond, at t = 0 .. 999 ms).
 * The first 100 drain the burst; the refill adds a token at 500 ms (and the
 * next only at 1000 ms, after the last request): 101 allowed. */
static void test_classic_thousand_in_one_second(void)
{
	sluice_limit_t l;
	sluice_state_t s = 0, next;
	sluice_decision_t d;
	char err[128];
	int64_t t0 = 1764500000000000LL;
	int i, allowed = 0;

	CHECK(sluice_limit_parse(&l, "100", "2/s", err, sizeof(err)) == 0);
	for (i = 0; i < 1000; i++) {
		sluice_eval(&l, s, t0 + i * 1000, 1, &next, &d);
		s = next;
		allowed += d.allowed;
	}
	CHECK(allowed == 101);
	/* The last answer: empty, next token at 1000 ms, i.e. 1 ms later. */
	CHECK(!d.allowed);
	CHECK_EQ_U64(d.retry_after_us, 1000);
	CHECK_EQ_U64(d.remaining, 0);
}

static void test_clock_backwards_never_grants(void)
{
	sluice_limit_t l;
	sluice_state_t s = 0, next;
	sluice_decision_t d;
	char err[128];
	int64_t t0 = 1764500000000000LL;
	int i;

	CHECK(sluice_limit_parse(&l, "10", "1/s", err, sizeof(err)) == 0);
	for (i = 0; i < 10; i++) {
		sluice_eval(&l, s, t0, 1, &next, &d);
		CHECK(d.allowed);
		s = next;
	}
	/* Empty at t0; the clock now steps back by up to a day. */
	for (i = 1; i < 100; i++) {
		sluice_eval(&l, s, t0 - (int64_t)i * 864000000LL, 1, &next, &d);
		CHECK(!d.allowed);
		CHECK_EQ_U64(d.remaining, 0);
		CHECK(next == s);
	}
	/* Back at t0 + 1 s exactly one token has refilled. */
	sluice_eval(&l, s, t0 + 1000000, 1, &next, &d);
	CHECK(d.allowed);
	sluice_eval(&l, next, t0 + 1000000, 1, &next, &d);
	CHECK(!d.allowed);
}

static void test_years_elapsed_and_extreme_rates(void)
{
	sluice_limit_t fast, slow;
	sluice_state_t s = 0, next;
	sluice_decision_t d;
	char err[128];
	int64_t t0 = 1764500000000000LL;
	int i;

	CHECK(sluice_limit_parse(&fast, "1000", "1000000/s", err,
				 sizeof(err)) == 0);
	CHECK(sluice_limit_parse(&slow, "1", "1/day", err, sizeof(err)) == 0);

	/* 1,000,000/s: draining 1000 takes 1000 us to refill. */
	for (i = 0; i < 1000; i++) {
		sluice_eval(&fast, s, t0, 1, &next, &d);
		CHECK(d.allowed);
		s = next;
	}
	sluice_eval(&fast, s, t0, 1, &next, &d);
	CHECK(!d.allowed);
	CHECK_EQ_U64(d.retry_after_us, 1);
	CHECK_EQ_U64(d.reset_after_us, 1000);

	/* 1/day. */
	s = 0;
	sluice_eval(&slow, s, t0, 1, &next, &d);
	CHECK(d.allowed);
	s = next;
	sluice_eval(&slow, s, t0 + 1000000, 1, &next, &d);
	CHECK(!d.allowed);
	CHECK_EQ_U64(d.retry_after_us, 86400000000ULL - 1000000);

	/* 200 years later: full, no overflow. */
	sluice_eval(&slow, s, t0 + 200LL * 365 * 86400000000LL, 1, &next, &d);
	CHECK(d.allowed);
	CHECK_EQ_U64(d.remaining, 0);
	sluice_eval(&fast, s, INT64_MAX / 2, 1000, &next, &d);
	CHECK(d.allowed);
}

static void test_cost_above_capacity_is_never(void)
{
	sluice_limit_t l;
	sluice_state_t next;
	sluice_decision_t d;
	char err[128];

	CHECK(sluice_limit_parse(&l, "5", "1/s", err, sizeof(err)) == 0);
	sluice_eval(&l, 0, 1000, 6, &next, &d);
	CHECK(!d.allowed);
	CHECK(d.never);
	CHECK(d.retry_after_us == UINT64_MAX);
	CHECK_EQ_U64(d.remaining, 5);
	CHECK(next == 0);
}

static void test_peek_changes_nothing(void)
{
	sluice_limit_t l;
	sluice_state_t s = 0, next;
	sluice_decision_t d;
	char err[128];

	CHECK(sluice_limit_parse(&l, "5", "1/s", err, sizeof(err)) == 0);
	sluice_eval(&l, s, 5000000, 2, &next, &d);
	s = next;
	sluice_eval(&l, s, 5000000, 0, &next, &d);
	CHECK(d.allowed);
	CHECK(next == s);
	CHECK_EQ_U64(d.remaining, 3);
	CHECK_EQ_U64(d.reset_after_us, 2000000);
}

/* A penalty is a charge with no check: the debt delays the next take by
 * the time the refill needs to pay it. */
static void test_penalize_goes_into_debt(void)
{
	sluice_limit_t l;
	sluice_state_t s = 0, next;
	sluice_decision_t d;
	char err[128];
	const int64_t now = 1000000000;

	CHECK(sluice_limit_parse(&l, "5", "1/s", err, sizeof(err)) == 0);
	s = sluice_penalize(&l, s, now, 8); /* 3 tokens beyond empty */
	sluice_eval(&l, s, now, 1, &next, &d);
	CHECK(!d.allowed);
	CHECK_EQ_U64(d.remaining, 0);
	CHECK_EQ_U64(d.retry_after_us, 4000000);
	CHECK_EQ_U64(d.reset_after_us, 8000000);
	sluice_eval(&l, s, now + 4000000, 1, &next, &d);
	CHECK(d.allowed);
	CHECK(sluice_penalize(&l, s, now, 0) == s);
	/* Bounded: a huge penalty saturates, representable and exact. */
	s = sluice_penalize(&l, 0, now, UINT64_MAX);
	CHECK(s > 0);
	CHECK(sluice_penalize(&l, s, now, 5) == s);
	sluice_eval(&l, s, now, 1, &next, &d);
	CHECK(!d.allowed);
	CHECK(d.retry_after_us > 365ull * 86400 * 1000000);
}

/* A block lets the first one-token take pass exactly ms later. */
static void test_block_for_ms(void)
{
	sluice_limit_t l;
	sluice_state_t s, next;
	sluice_decision_t d;
	char err[128];
	const int64_t now = 1000000000;

	CHECK(sluice_limit_parse(&l, "10", "50/min", err, sizeof(err)) == 0);
	s = sluice_block(&l, 0, now, 2500);
	sluice_eval(&l, s, now, 1, &next, &d);
	CHECK(!d.allowed);
	CHECK_EQ_U64(d.retry_after_us, 2500000);
	sluice_eval(&l, s, now + 2499999, 1, &next, &d);
	CHECK(!d.allowed);
	sluice_eval(&l, s, now + 2500000, 1, &next, &d);
	CHECK(d.allowed);
	/* A shorter block leaves the longer one; 0 changes nothing. */
	CHECK(sluice_block(&l, s, now, 1000) == s);
	CHECK(sluice_block(&l, 0, now, 0) == 0);
	s = sluice_block(&l, 0, now, UINT64_MAX);
	sluice_eval(&l, s, now, 1, &next, &d);
	CHECK(!d.allowed);
}

/* The state is the TAT and expires exactly when the bucket is full. */
static void test_state_expires_when_full(void)
{
	sluice_limit_t l;
	sluice_state_t next;
	sluice_decision_t d;
	char err[128];
	int64_t t0 = 1764500000000000LL;

	CHECK(sluice_limit_parse(&l, "7", "7/day", err, sizeof(err)) == 0);
	sluice_eval(&l, 0, t0, 3, &next, &d);
	/* 3 tokens at 7/day: 3 * 86400e6 / 7 us = 37028571428.57 us */
	CHECK(sluice_state_expiry_us(next) == t0 + 37028571429LL);
	CHECK_EQ_U64(d.reset_after_us, 37028571429ULL);
	CHECK(next == (t0 + 37028571428LL) * 1000 + 4); /* 4/7 us */
}

static void test_all_or_nothing(void)
{
	sluice_limit_t l[2];
	sluice_state_t s[2] = {0, 0}, next[2];
	sluice_decision_t d[2], sum;
	char err[128];
	int64_t now = 1764500000000000LL;
	int i;

	CHECK(sluice_limit_parse(&l[0], "10", "1/s", err, sizeof(err)) == 0);
	CHECK(sluice_limit_parse(&l[1], "3", "3/day", err, sizeof(err)) == 0);
	for (i = 0; i < 3; i++) {
		CHECK(sluice_eval_all(l, s, 2, now, 1, next, d, &sum) == 1);
		memcpy(s, next, sizeof(s));
	}
	CHECK_EQ_U64(sum.remaining, 0);
	/* The daily limit rejects: the burst limit is not charged. */
	CHECK(sluice_eval_all(l, s, 2, now, 1, next, d, &sum) == 0);
	CHECK(next[0] == s[0] && next[1] == s[1]);
	CHECK(!sum.allowed);
	CHECK_EQ_U64(sum.limit, 3);
	CHECK_EQ_U64(d[0].remaining, 7);
	CHECK_EQ_U64(sum.retry_after_us, 86400000000ULL / 3);
	/* The summary names the limit it came from; so does each decision. */
	CHECK(sum.which == 1 && d[0].which == 0 && d[1].which == 1);
	CHECK(sluice_eval_all(l + 1, s + 1, 1, now, 1, next, d, &sum) == 0);
	CHECK(sum.which == 0);
}

static void expect_id(const char *cap, const char *rate, const char *want)
{
	sluice_limit_t l;
	char id[SLUICE_LIMIT_ID_MAX], err[128];
	size_t n;

	CHECK(sluice_limit_parse(&l, cap, rate, err, sizeof(err)) == 0);
	n = sluice_limit_id(&l, id);
	if (strcmp(id, want) != 0)
		fprintf(stderr, "limit %s %s: id %s, want %s\n", cap, rate, id,
			want);
	CHECK(strcmp(id, want) == 0 && n == strlen(want));
}

/* A limit's id names its bucket in every store: one spelling per limit
 * (however the rate was written, in any terms), distinct for distinct
 * limits, within SLUICE_LIMIT_ID_MAX. */
static void test_limit_id_is_canonical(void)
{
	sluice_limit_t a, b;
	sluice_rate_t r = {3000000, 6}; /* 2/s, not in lowest terms */
	char ia[SLUICE_LIMIT_ID_MAX], ib[SLUICE_LIMIT_ID_MAX];

	expect_id("100", "2/s", "100@2/s");
	expect_id("100", "120/min", "100@2/s");
	expect_id("100", "0.5/s", "100@30/min");
	expect_id("1000", "1000/hour", "1000@1000/h");
	expect_id("7", "7/86400000000us", "7@7/day");
	expect_id("5", "1/3d", "5@1/259200s");
	expect_id("10", "3/7000000us", "10@3/7000000us");
	expect_id("2", "1/140737488355328us", "2@1/140737488355328us");
	/* The longest id: capacity and interval near 2^52, per 999. */
	{
		sluice_limit_t l = {UINT64_C(4503599627370495),
				    {UINT64_C(4503599627370495), 999},
				    0,
				    {0, 0, 0, 0}};
		char id[SLUICE_LIMIT_ID_MAX];

		CHECK(sluice_limit_id(&l, id) < SLUICE_LIMIT_ID_MAX);
	}
	/* Hand-built in other terms: the same limit, the same id. */
	CHECK(sluice_limit_parse(&a, "100", "2/s", NULL, 0) == 0);
	b = a;
	b.rate = r;
	CHECK(sluice_limit_same(&a, &b));
	sluice_limit_id(&a, ia);
	sluice_limit_id(&b, ib);
	CHECK(strcmp(ia, ib) == 0);
	/* sluice_limit_init() keeps the rate in lowest terms. */
	CHECK(sluice_limit_init(&b, 100, &r, NULL, 0) == 0);
	CHECK(b.rate.interval == 500000 && b.rate.per == 1);
	/* Another capacity or rate: another limit. */
	CHECK(sluice_limit_parse(&b, "101", "2/s", NULL, 0) == 0);
	CHECK(!sluice_limit_same(&a, &b));
	CHECK(sluice_limit_parse(&b, "100", "3/s", NULL, 0) == 0);
	CHECK(!sluice_limit_same(&a, &b));
}

/* The id is "<capacity>@" and the rate's canonical text (in lowest
 * terms), as sluice_rate_format() writes it, cut to SLUICE_LIMIT_ID_MAX:
 * checked against that over a deterministic sweep of capacities and
 * rates, in lowest terms and not, whole counts per unit and not. */
static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

static void test_limit_id_matches_rate_format(void)
{
	static const uint64_t caps[] = {
		1,	   2, 100, 999, 1000000, UINT64_C(4503599627370495),
		UINT64_MAX};
	uint64_t x = 12345;
	size_t i, c, k;

	for (i = 0; i < 20000; i++) {
		sluice_limit_t l;
		sluice_rate_t r;
		char got[SLUICE_LIMIT_ID_MAX], want[SLUICE_LIMIT_ID_MAX];
		uint64_t g;
		int n;

		/* A 64-bit LCG: the same sweep every run. */
		x = x * UINT64_C(6364136223846793005) +
		    UINT64_C(1442695040888963407);
		switch (i % 4) {
		case 0: /* a unit's whole count: 1..1000 per unit */
			r.interval = (uint64_t[]){1000000, 60000000, 3600000000,
						  86400000000}[(x >> 8) % 4];
			r.per = (uint32_t)((x >> 16) % 1000 + 1);
			break;
		case 1: /* any interval, small */
			r.interval = (x >> 8) % 5000000 + 1;
			r.per = (uint32_t)((x >> 40) % 1000 + 1);
			break;
		case 2: /* any interval, large */
			r.interval = (x >> 3) % (UINT64_C(1) << 52) + 1;
			r.per = (uint32_t)((x >> 50) % 1000 + 1);
			break;
		default: /* beyond SLUICE_RATE_PER_MAX (hand-built) */
			r.interval = (x >> 8) % 100000000 + 1;
			r.per = (uint32_t)((x >> 40) % 100000 + 1);
			break;
		}
		c = caps[(x >> 33) % (sizeof(caps) / sizeof(caps[0]))];
		memset(&l, 0, sizeof(l)); /* a token bucket: window all 0 */
		l.capacity = c == 999 ? (x >> 12) : c;
		l.rate = r;
		l.tau = 0;
		g = gcd(r.interval, r.per);
		r.interval /= g;
		r.per /= (uint32_t)g;
		n = snprintf(want, sizeof(want), "%llu@",
			     (unsigned long long)l.capacity);
		n += sluice_rate_format(&r, want + n, sizeof(want) - (size_t)n);
		if (n >= SLUICE_LIMIT_ID_MAX)
			n = SLUICE_LIMIT_ID_MAX - 1;
		k = sluice_limit_id(&l, got);
		if (strcmp(got, want) != 0 || k != (size_t)n)
			fprintf(stderr,
				"limit %llu %llu/%u: id %s (%zu), want %s "
				"(%d)\n",
				(unsigned long long)l.capacity,
				(unsigned long long)l.rate.interval, l.rate.per,
				got, k, want, n);
		CHECK(strcmp(got, want) == 0 && k == (size_t)n);
	}
}

int main(void)
{
	RUN(test_matches_exact_model);
	RUN(test_limit_changes_match_model);
	RUN(test_carry_drained_lowered_raised_half_used);
	RUN(test_never_more_than_capacity_plus_rate);
	RUN(test_thirty_days_no_drift);
	RUN(test_classic_thousand_in_one_second);
	RUN(test_clock_backwards_never_grants);
	RUN(test_years_elapsed_and_extreme_rates);
	RUN(test_cost_above_capacity_is_never);
	RUN(test_peek_changes_nothing);
	RUN(test_penalize_goes_into_debt);
	RUN(test_block_for_ms);
	RUN(test_state_expires_when_full);
	RUN(test_all_or_nothing);
	RUN(test_limit_id_is_canonical);
	RUN(test_limit_id_matches_rate_format);
	TESTS_DONE();
}
