/*
 * test_sim.c -- the traffic simulator: the comparison policies behave as
 * the textbook says, the token bucket is the real sluice_eval(), and a seed
 * always gives the same trace and the same report.
 */
#include "check.h"
#include "sim/prng.h"
#include "sim/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC INT64_C(1000000)
#define MS  INT64_C(1000)

/* ------------------------------------------------------------- helpers */

static sluice_limit_t classic(void)
{
	sluice_limit_t l;

	if (sluice_limit_parse(&l, "100", "2/s", NULL, 0) != 0)
		abort();
	return l;
}

/* n requests from client c, from t0 on, `gap` apart. */
static void series(sluice_sim_trace_t *tr, uint32_t c, int64_t t0, int64_t gap,
		   unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (sluice_sim_add_event(tr, t0 + (int64_t)i * gap, c, 0) != 0)
			abort();
}

/* Replays tr against p alone; returns the passes, writes their times. */
static size_t passes(sluice_sim_policy_t *p, const sluice_sim_trace_t *tr,
		     int64_t *times)
{
	size_t i, n = 0;

	for (i = 0; i < tr->nevents; i++)
		if (p->take(p, tr, &tr->events[i]))
			times[n++] = tr->events[i].t_us;
	return n;
}

/* One abuser: 100 requests 5 ms apart from 59.0 s, 100 more from 60.0 s. */
static void boundary_trace(sluice_sim_trace_t *tr)
{
	memset(tr, 0, sizeof(*tr));
	tr->duration_us = 120 * SEC;
	CHECK_EQ_U64(sluice_sim_add_client(tr, SLUICE_SIM_ABUSER, "eve",
					   "192.0.2.1"),
		     0);
	series(tr, 0, 59 * SEC, 5 * MS, 100);
	series(tr, 0, 60 * SEC, 5 * MS, 100);
}

/* -------------------------------------------------------------- tests */

static void test_max_in_span_counts_a_half_open_span(void)
{
	const int64_t t[] = {0, 1, 2, 2 * SEC, 2 * SEC + 1};
	int64_t at = -1;

	CHECK_EQ_U64(sluice_sim_max_in_span(t, 5, 2 * SEC, &at), 3);
	CHECK_EQ_U64(at, 0);
	CHECK_EQ_U64(sluice_sim_max_in_span(t, 5, 1, &at), 1);
	CHECK_EQ_U64(sluice_sim_max_in_span(t, 0, 2 * SEC, NULL), 0);
}

static void test_fixed_window_passes_twice_its_limit_across_a_boundary(void)
{
	sluice_sim_trace_t tr;
	sluice_sim_policy_t *p;
	sluice_sim_result_t r;
	int64_t times[300];

	boundary_trace(&tr);
	series(&tr, 0, 60 * SEC + 500 * MS, 5 * MS, 100); /* over the limit */
	p = sluice_sim_fixed_window(100, 60 * SEC, tr.nkeys);
	CHECK_EQ_U64(passes(p, &tr, times), 200);
	/* All 200 lie within 1.5 s. */
	CHECK_EQ_U64(times[199] - times[0], 1495 * MS);
	sluice_sim_policy_free(p);

	p = sluice_sim_fixed_window(100, 60 * SEC, tr.nkeys);
	CHECK_EQ_U64(sluice_sim_run(&tr, &p, 1, &r), 0);
	CHECK_EQ_U64(r.spike, 200);
	CHECK_EQ_U64(r.spike_start_us, 59 * SEC);
	CHECK_EQ_U64(r.abuse, 300);
	CHECK_EQ_U64(r.abuse_rejected, 100);
	CHECK_EQ_U64(r.legit, 0);
	sluice_sim_result_free(&r);
	sluice_sim_policy_free(p);
	sluice_sim_trace_free(&tr);
}

static void test_token_bucket_passes_capacity_plus_refill(void)
{
	sluice_limit_t l = classic();
	sluice_sim_trace_t tr;
	sluice_sim_policy_t *p;
	sluice_sim_result_t r;

	/* 100 from the full bucket; by 60.000 s one second has refilled 2
	 * tokens, taken at 60.000 and 60.005; nothing else until 60.5 s. */
	boundary_trace(&tr);
	p = sluice_sim_token_bucket(&l, tr.nkeys);
	CHECK_EQ_U64(sluice_sim_run(&tr, &p, 1, &r), 0);
	CHECK_EQ_U64(r.abuse - r.abuse_rejected, 102);
	CHECK_EQ_U64(r.spike, 102);
	CHECK(r.spike <= 100 + 2 * 2);
	sluice_sim_result_free(&r);
	sluice_sim_policy_free(p);
	sluice_sim_trace_free(&tr);
}

static void
test_token_bucket_never_passes_more_than_capacity_plus_rate_x_span(void)
{
	static const int64_t spans_s[] = {1, 2, 5, 10, 60, 300};
	sluice_limit_t l = classic();
	sluice_sim_trace_t tr;
	sluice_prng_t r;
	int64_t *times;
	unsigned c, b;
	size_t s;

	/* Random bursts, 3 clients (one key each), checked one at a time. */
	memset(&tr, 0, sizeof(tr));
	tr.duration_us = 600 * SEC;
	sluice_prng_seed(&r, 42);
	for (c = 0; c < 3; c++) {
		char ip[32];

		snprintf(ip, sizeof(ip), "10.0.0.%u", c + 1);
		CHECK_EQ_U64(
			sluice_sim_add_client(&tr, SLUICE_SIM_ABUSER, "", ip),
			c);
		for (b = 0; b < 200; b++)
			series(&tr, c, sluice_prng_range(&r, 0, 590 * SEC),
			       sluice_prng_range(&r, 0, 50 * MS),
			       (unsigned)sluice_prng_range(&r, 1, 150));
	}
	sluice_sim_sort(&tr);
	times = malloc(tr.nevents * sizeof(*times));
	for (c = 0; c < 3; c++) {
		sluice_sim_trace_t one = tr;
		sluice_sim_event_t *ev = malloc(tr.nevents * sizeof(*ev));
		sluice_sim_policy_t *p = sluice_sim_token_bucket(&l, tr.nkeys);
		size_t i, n = 0, np;

		for (i = 0; i < tr.nevents; i++)
			if (tr.events[i].client == c)
				ev[n++] = tr.events[i];
		one.events = ev;
		one.nevents = n;
		np = passes(p, &one, times);
		CHECK(np > 0 && np < n);
		for (s = 0; s < sizeof(spans_s) / sizeof(spans_s[0]); s++)
			CHECK(sluice_sim_max_in_span(times, np,
						     spans_s[s] * SEC, NULL) <=
			      (uint64_t)(100 + 2 * spans_s[s]));
		sluice_sim_policy_free(p);
		free(ev);
	}
	free(times);
	sluice_sim_trace_free(&tr);
}

static void test_sliding_log_never_passes_more_than_limit_per_window(void)
{
	sluice_sim_trace_t tr;
	sluice_sim_policy_t *p;
	int64_t times[400];
	size_t n;

	boundary_trace(&tr);
	series(&tr, 0, 118 * SEC, 10 * MS, 100);
	p = sluice_sim_sliding_log(100, 60 * SEC, tr.nkeys);
	n = passes(p, &tr, times);
	/* 100 pass from 59 s; everything else comes before the first pass
	 * ages out at 119 s. */
	CHECK_EQ_U64(sluice_sim_max_in_span(times, n, 60 * SEC, NULL), 100);
	CHECK_EQ_U64(n, 100);
	sluice_sim_policy_free(p);
	sluice_sim_trace_free(&tr);
}

static void test_sliding_counter_weights_the_previous_window(void)
{
	sluice_sim_trace_t tr;
	sluice_sim_policy_t *p;
	int64_t times[200];

	/* 100 in window 0, then 100 at once half-way through window 1: the
	 * estimate is 100 x 0.5 + current, so 50 more pass. */
	memset(&tr, 0, sizeof(tr));
	tr.duration_us = 120 * SEC;
	CHECK_EQ_U64(sluice_sim_add_client(&tr, SLUICE_SIM_MOBILE, "ann",
					   "10.1.1.1"),
		     0);
	series(&tr, 0, 10 * SEC, 1 * MS, 100);
	series(&tr, 0, 90 * SEC, 0, 100);
	p = sluice_sim_sliding_counter(100, 60 * SEC, tr.nkeys);
	CHECK_EQ_U64(passes(p, &tr, times), 150);
	sluice_sim_policy_free(p);
	sluice_sim_trace_free(&tr);
}

static void test_classic_key_is_user_id_else_ip(void)
{
	sluice_sim_trace_t tr;

	memset(&tr, 0, sizeof(tr));
	CHECK_EQ_U64(
		sluice_sim_add_client(&tr, SLUICE_SIM_MULTI, "p1", "10.0.0.1"),
		0);
	CHECK_EQ_U64(
		sluice_sim_add_client(&tr, SLUICE_SIM_MULTI, "p1", "10.0.0.1"),
		1);
	CHECK_EQ_U64(sluice_sim_add_client(&tr, SLUICE_SIM_NAT_ANON, "",
					   "198.51.100.7"),
		     2);
	CHECK_EQ_U64(sluice_sim_add_client(&tr, SLUICE_SIM_NAT_ANON, "",
					   "198.51.100.7"),
		     3);
	CHECK_EQ_U64(sluice_sim_add_client(&tr, SLUICE_SIM_NAT_USER, "u1",
					   "198.51.100.7"),
		     4);
	CHECK_EQ_U64(tr.nkeys, 3);
	CHECK_EQ_U64(tr.clients[0].key, tr.clients[1].key);
	CHECK_EQ_U64(tr.clients[2].key, tr.clients[3].key);
	CHECK(tr.clients[4].key != tr.clients[2].key);
	CHECK(strcmp(tr.keys[tr.clients[2].key], "198.51.100.7") == 0);
	CHECK(sluice_sim_add_client(&tr, SLUICE_SIM_MOBILE, "x", "not-an-ip") <
	      0);
	sluice_sim_trace_free(&tr);
}

static int same_trace(const sluice_sim_trace_t *a, const sluice_sim_trace_t *b)
{
	size_t i;

	if (a->nevents != b->nevents || a->nclients != b->nclients ||
	    a->nkeys != b->nkeys)
		return 0;
	if (memcmp(a->events, b->events, a->nevents * sizeof(*a->events)))
		return 0;
	for (i = 0; i < a->nkeys; i++)
		if (strcmp(a->keys[i], b->keys[i]))
			return 0;
	return 1;
}

static void run_all(const sluice_sim_trace_t *tr, sluice_sim_result_t *res)
{
	sluice_limit_t l = classic();
	sluice_sim_policy_t *p[4];
	size_t i;

	p[0] = sluice_sim_fixed_window(100, 60 * SEC, tr->nkeys);
	p[1] = sluice_sim_sliding_log(100, 60 * SEC, tr->nkeys);
	p[2] = sluice_sim_sliding_counter(100, 60 * SEC, tr->nkeys);
	p[3] = sluice_sim_token_bucket(&l, tr->nkeys);
	CHECK_EQ_U64(sluice_sim_run(tr, p, 4, res), 0);
	for (i = 0; i < 4; i++)
		sluice_sim_policy_free(p[i]);
}

static void test_same_seed_same_trace_and_report(void)
{
	sluice_sim_params_t pa;
	sluice_sim_trace_t a, b, c;
	sluice_sim_result_t ra[4], rb[4];
	size_t i;

	sluice_sim_params_default(&pa);
	pa.duration_us = 300 * SEC;
	CHECK_EQ_U64(sluice_sim_generate(&pa, 7, &a), 0);
	CHECK_EQ_U64(sluice_sim_generate(&pa, 7, &b), 0);
	CHECK_EQ_U64(sluice_sim_generate(&pa, 8, &c), 0);
	CHECK(a.nevents > 1000);
	CHECK(same_trace(&a, &b));
	CHECK(!same_trace(&a, &c));
	for (i = 1; i < a.nevents; i++)
		if (a.events[i - 1].t_us > a.events[i].t_us)
			break;
	CHECK_EQ_U64(i, a.nevents); /* sorted */
	CHECK(a.events[a.nevents - 1].t_us < pa.duration_us);

	run_all(&a, ra);
	run_all(&b, rb);
	for (i = 0; i < 4; i++) {
		CHECK_EQ_U64(ra[i].legit_rejected, rb[i].legit_rejected);
		CHECK_EQ_U64(ra[i].abuse_rejected, rb[i].abuse_rejected);
		CHECK_EQ_U64(ra[i].spike, rb[i].spike);
		CHECK(memcmp(ra[i].abuse_passed, rb[i].abuse_passed,
			     ra[i].nseconds * sizeof(uint32_t)) == 0);
		sluice_sim_result_free(&ra[i]);
		sluice_sim_result_free(&rb[i]);
	}
	sluice_sim_trace_free(&a);
	sluice_sim_trace_free(&b);
	sluice_sim_trace_free(&c);
}

static void test_standard_mix_shows_the_boundary_spike_and_the_bound(void)
{
	sluice_sim_params_t pa;
	sluice_sim_trace_t tr;
	sluice_sim_result_t r[4];
	size_t i;

	/* The boundary-aware abuser gets 2x the limit through a fixed window;
	 * the bucket stays within 100 + 2/s x 2 s; no mobile user is ever
	 * rejected by the bucket; abusers get almost nothing through. */
	sluice_sim_params_default(&pa);
	CHECK_EQ_U64(sluice_sim_generate(&pa, 1, &tr), 0);
	run_all(&tr, r);
	CHECK_EQ_U64(r[0].spike, 200);
	CHECK(r[1].spike <= 100);
	CHECK(r[3].spike <= 104);
	CHECK_EQ_U64(r[3].rejected[SLUICE_SIM_MOBILE], 0);
	CHECK(r[3].requests[SLUICE_SIM_ABUSER] > 100000);
	for (i = 0; i < 4; i++) {
		CHECK(r[i].abuse_rejected * 10 > r[i].abuse * 9);
		CHECK(r[i].legit_rejected < r[i].legit / 10);
		sluice_sim_result_free(&r[i]);
	}
	sluice_sim_trace_free(&tr);
}

int main(void)
{
	RUN(test_max_in_span_counts_a_half_open_span);
	RUN(test_fixed_window_passes_twice_its_limit_across_a_boundary);
	RUN(test_token_bucket_passes_capacity_plus_refill);
	RUN(test_token_bucket_never_passes_more_than_capacity_plus_rate_x_span);
	RUN(test_sliding_log_never_passes_more_than_limit_per_window);
	RUN(test_sliding_counter_weights_the_previous_window);
	RUN(test_classic_key_is_user_id_else_ip);
	RUN(test_same_seed_same_trace_and_report);
	RUN(test_standard_mix_shows_the_boundary_spike_and_the_bound);
	TESTS_DONE();
}
