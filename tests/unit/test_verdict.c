/*
 * test_verdict.c -- the ways past a limit that the verdict engine closes:
 * a rule beyond the first sixteen matches still counts, and a request
 * that one rule rejects charges no other rule, however many requests
 * race (a store that answers later, as Redis does; threads on the memory
 * store).
 */
#include "check.h"
#include "fake_store.h"
#include "policy/verdict.h"
#include "stores.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ requests */

typedef struct req_s {
	sluice_request_t r;
	struct sockaddr_in peer;
	const char *user; /* x-user-id */
	int hdrs;	  /* sends x-h0 .. x-h<hdrs-1> */
} req_t;

static const char *lookup(void *ctx, const char *name, size_t *len)
{
	const req_t *q = ctx;
	int n;

	if (strcmp(name, "x-user-id") == 0 && q->user) {
		*len = strlen(q->user);
		return q->user;
	}
	if (sscanf(name, "x-h%d", &n) == 1 && n < q->hdrs) {
		*len = 1;
		return "v";
	}
	return NULL;
}

static sluice_request_t *mkreq(req_t *q, const char *path, const char *user,
			       int hdrs)
{
	memset(q, 0, sizeof(*q));
	q->peer.sin_family = AF_INET;
	inet_pton(AF_INET, "192.0.2.7", &q->peer.sin_addr);
	q->user = user;
	q->hdrs = hdrs;
	q->r.method = "POST";
	q->r.method_len = 4;
	q->r.path = path;
	q->r.path_len = strlen(path);
	q->r.header = lookup;
	q->r.header_ctx = q;
	q->r.peer = (const struct sockaddr *)&q->peer;
	return &q->r;
}

static sluice_config_t *parse(const char *yaml)
{
	char err[512];
	sluice_config_t *c = sluice_config_parse(
		"test.yaml", yaml, strlen(yaml), err, sizeof(err));

	if (!c) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	return c;
}

static int nallowed;
static sluice_verdict_t last;

static void on_verdict(void *arg, const sluice_verdict_t *v)
{
	(void)arg;
	nallowed += v->allowed;
	last = *v;
}

/* The remaining tokens of one rule's bucket for a request (a cost-0
 * peek through the same engine). */
static uint64_t remaining(sluice_backend_t *be, const sluice_config_t *cfg,
			  const sluice_request_t *req, const char *rule)
{
	sluice_take_t *t = sluice_take_new();
	uint64_t rem = UINT64_MAX;
	size_t i;

	if (!t || sluice_take_match(t, cfg, req) < 0)
		abort();
	for (i = 0; i < t->nmatches; i++)
		if (strcmp(t->matches[i].rule->name, rule) == 0) {
			t->matches[0] = t->matches[i];
			t->costs[0] = 0;
			t->nmatches = 1;
			sluice_verdict_decide(be, t, sluice_now_us(),
					      on_verdict, NULL);
			rem = last.summary.remaining;
			break;
		}
	sluice_take_free(t);
	return rem;
}

/* ---------------------------------------------- every matching rule */

static void test_a_rule_after_sixteen_matching_ones_still_counts(void)
{
	char yaml[8192];
	size_t n = 0;
	int i;
	sluice_memstore_t *m = open_memstore(1000);
	sluice_backend_t be;
	sluice_config_t *cfg;
	sluice_take_t *t = sluice_take_new();
	req_t q;

	n += (size_t)snprintf(yaml + n, sizeof(yaml) - n, "rules:\n");
	for (i = 0; i < 16; i++)
		n += (size_t)snprintf(yaml + n, sizeof(yaml) - n,
				      "  - name: h%d\n"
				      "    key: [\"header:x-h%d\"]\n"
				      "    limits: [{capacity: 1000, rate: "
				      "1000/day}]\n",
				      i, i);
	snprintf(yaml + n, sizeof(yaml) - n,
		 "  - name: upload\n"
		 "    match: {path: \"/api/upload\"}\n"
		 "    key: [ip]\n"
		 "    limits: [{capacity: 2, rate: 2/min}]\n");
	cfg = parse(yaml);
	sluice_backend_memory(&be, m);
	CHECK(t != NULL);
	nallowed = 0;
	for (i = 0; i < 10; i++) {
		CHECK(sluice_take_match(
			      t, cfg, mkreq(&q, "/api/upload", NULL, 16)) == 0);
		CHECK_EQ_U64(t->nmatches, 17);
		sluice_verdict_decide(&be, t, sluice_now_us(), on_verdict,
				      NULL);
	}
	CHECK_EQ_U64(nallowed, 2);
	CHECK(strcmp(t->matches[last.report].rule->name, "upload") == 0);
	sluice_take_free(t);
	sluice_config_free(cfg);
	sluice_memstore_free(m);
}

static void test_every_one_of_a_thousand_matching_rules_counts(void)
{
	size_t cap = 1024 * 120, n = 0;
	char *yaml = malloc(cap);
	sluice_memstore_t *m = open_memstore(4096);
	sluice_backend_t be;
	sluice_config_t *cfg;
	sluice_take_t *t = sluice_take_new();
	req_t q;
	int i;

	CHECK(yaml && t);
	n += (size_t)snprintf(yaml + n, cap - n, "rules:\n");
	for (i = 0; i < 1023; i++)
		n += (size_t)snprintf(yaml + n, cap - n,
				      "  - name: r%d\n"
				      "    key: [ip]\n"
				      "    limits: [{capacity: 100, rate: "
				      "1/h}]\n",
				      i);
	snprintf(yaml + n, cap - n,
		 "  - name: last\n"
		 "    key: [ip]\n"
		 "    limits: [{capacity: 1, rate: 1/h}]\n");
	cfg = parse(yaml);
	free(yaml);
	sluice_backend_memory(&be, m);
	nallowed = 0;
	for (i = 0; i < 3; i++) {
		CHECK(sluice_take_match(t, cfg, mkreq(&q, "/", NULL, 0)) == 0);
		CHECK_EQ_U64(t->nmatches, 1024);
		sluice_verdict_decide(&be, t, sluice_now_us(), on_verdict,
				      NULL);
	}
	CHECK_EQ_U64(nallowed, 1);
	CHECK_EQ_U64(remaining(&be, cfg, mkreq(&q, "/", NULL, 0), "r0"), 99);
	sluice_take_free(t);
	sluice_config_free(cfg);
	sluice_memstore_free(m);
}

/* ------------------------------------------- all or nothing, racing */

static const char wide_narrow[] =
	"rules:\n"
	"  - name: wide\n"
	"    key: [ip]\n"
	"    limits: [{capacity: 1000, rate: 1000/day}]\n"
	"  - name: narrow\n"
	"    key: [\"header:x-user-id\"]\n"
	"    limits: [{capacity: 20, rate: 20/day}]\n";

#define RACERS 200

/* 200 requests in flight at once on a store that answers later (as 200
 * concurrent requests on one Redis): only the 20 allowed are charged to
 * `wide`. */
static void test_racing_requests_charge_wide_only_for_the_allowed(void)
{
	static deferred_t d;
	static sluice_take_t *t[RACERS];
	sluice_backend_t be = {&deferred_ops, &d, NULL}, mem;
	sluice_config_t *cfg = parse(wide_narrow);
	req_t q;
	int i;

	d.store = open_memstore(1000);
	d.n = 0;
	nallowed = 0;
	for (i = 0; i < RACERS; i++) {
		t[i] = sluice_take_new();
		CHECK(t[i] != NULL);
		CHECK(sluice_take_match(t[i], cfg,
					mkreq(&q, "/", "mallory", 0)) == 0);
		CHECK_EQ_U64(t[i]->nmatches, 2);
		sluice_verdict_decide(&be, t[i], sluice_now_us(), on_verdict,
				      NULL);
	}
	/* All 200 are in flight; then the store answers them. */
	CHECK_EQ_U64(nallowed, 0);
	CHECK_EQ_U64(deferred_run(&d), RACERS);
	CHECK_EQ_U64(nallowed, 20);
	sluice_backend_memory(&mem, d.store);
	CHECK_EQ_U64(remaining(&mem, cfg, mkreq(&q, "/", "mallory", 0), "wide"),
		     980);
	for (i = 0; i < RACERS; i++)
		sluice_take_free(t[i]);
	sluice_memstore_free(d.store);
	sluice_config_free(cfg);
}

typedef struct racer_s {
	sluice_backend_t *be;
	const sluice_config_t *cfg;
	int requests, allowed;
} racer_t;

static void racer_verdict(void *arg, const sluice_verdict_t *v)
{
	((racer_t *)arg)->allowed += v->allowed;
}

static void *racer(void *arg)
{
	racer_t *r = arg;
	sluice_take_t *t = sluice_take_new();
	req_t q;
	int i;

	for (i = 0; t && i < r->requests; i++) {
		if (sluice_take_match(t, r->cfg, mkreq(&q, "/", "mallory", 0)))
			break;
		sluice_verdict_decide(r->be, t, sluice_now_us(), racer_verdict,
				      r);
	}
	sluice_take_free(t);
	return NULL;
}

/* The memory store with any number of threads: exactly the allowed
 * requests are charged. */
static void test_threads_charge_wide_only_for_the_allowed(void)
{
	enum { THREADS = 8 };
	sluice_memstore_t *m = open_memstore(1000);
	sluice_config_t *cfg = parse(wide_narrow);
	sluice_backend_t be;
	pthread_t th[THREADS];
	racer_t r[THREADS];
	int i, allowed = 0, round;
	req_t q;

	sluice_backend_memory(&be, m);
	for (round = 0; round < 5; round++) {
		for (i = 0; i < THREADS; i++) {
			r[i].be = &be;
			r[i].cfg = cfg;
			r[i].requests = RACERS / THREADS;
			r[i].allowed = 0;
			pthread_create(&th[i], NULL, racer, &r[i]);
		}
		for (i = 0; i < THREADS; i++) {
			pthread_join(th[i], NULL);
			allowed += r[i].allowed;
		}
	}
	/* 5 rounds of 200 from one user: 20 pass in all (20/day refills
	 * nothing meanwhile), and `wide` paid for those 20 alone. */
	CHECK_EQ_U64(allowed, 20);
	CHECK_EQ_U64(remaining(&be, cfg, mkreq(&q, "/", "mallory", 0), "wide"),
		     980);
	sluice_config_free(cfg);
	sluice_memstore_free(m);
}

int main(void)
{
	RUN(test_a_rule_after_sixteen_matching_ones_still_counts);
	RUN(test_every_one_of_a_thousand_matching_rules_counts);
	RUN(test_racing_requests_charge_wide_only_for_the_allowed);
	RUN(test_threads_charge_wide_only_for_the_allowed);
	TESTS_DONE();
}
