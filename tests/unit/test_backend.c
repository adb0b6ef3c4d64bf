/*
 * test_backend.c -- the verdict engine over a store driver: every matching
 * rule however many, all-or-nothing across rules (also under threads),
 * shadow rules, on_store_error (open, closed, local), and drivers that
 * answer later (as the Redis store does).
 */
#include "check.h"
#include "fake_store.h"
#include "policy/verdict.h"
#include "stores.h"

#include <pthread.h>

#include <string.h>

static const char yaml[] =
	"rules:\n"
	"  - name: tight\n"
	"    key: [\"header:x-user-id\"]\n"
	"    limits: [{capacity: 2, rate: 1/min}]\n"
	"  - name: loose\n"
	"    key: [\"header:x-user-id\"]\n"
	"    limits: [{capacity: 5, rate: 1/min}, {capacity: 3, rate: 1/h}]\n"
	"  - name: open\n"
	"    on_store_error: open\n"
	"    limits: [{capacity: 5, rate: 1/min}]\n"
	"  - name: closed\n"
	"    on_store_error: closed\n"
	"    limits: [{capacity: 5, rate: 1/min}]\n"
	"  - name: local\n"
	"    on_store_error: local\n"
	"    limits: [{capacity: 5, rate: 1/min}]\n"
	"  - name: shadow\n"
	"    shadow: true\n"
	"    on_store_error: closed\n"
	"    limits: [{capacity: 1, rate: 1/min}]\n";

static sluice_config_t *cfg;

static const sluice_rule_t *rule(const char *name)
{
	size_t i;

	for (i = 0; i < cfg->nrules; i++)
		if (strcmp(cfg->rules[i].name, name) == 0)
			return &cfg->rules[i];
	abort();
}

static void add(sluice_take_t *t, const char *name, const char *id)
{
	sluice_match_t *m = &t->matches[t->nmatches];
	const sluice_rule_t *r = rule(name);

	m->rule = r;
	m->set = &r->limits;
	sluice_rule_key(r, id, strlen(id), m);
	t->costs[t->nmatches++] = r->cost;
}

/* ------------------------------------------------------- fake drivers */

/* Fails every call. */
static int failing_take(void *impl, sluice_take_item_t *items, size_t n,
			int64_t now_us, sluice_store_cb cb, void *arg)
{
	cb(arg, SLUICE_ETIMEDOUT, 0);
	return 0;
}

static int failing_healthy(void *impl)
{
	return 0;
}

static const sluice_store_ops_t failing_ops = {
	.name = "failing", .take = failing_take, .healthy = failing_healthy};

/* ------------------------------------------------------------- helpers */

static int calls;
static sluice_verdict_t got;

static void on_verdict(void *arg, const sluice_verdict_t *v)
{
	calls++;
	got = *v;
}

static void decide(sluice_backend_t *be, sluice_take_t *t)
{
	calls = 0;
	sluice_verdict_decide(be, t, sluice_now_us(), on_verdict, NULL);
}

static sluice_backend_t memory_backend(sluice_memstore_t *m)
{
	sluice_backend_t be;

	sluice_backend_memory(&be, m);
	return be;
}

/* Takes live until the end of main (freed there). */
static sluice_take_t *takes[64];
static size_t ntakes;

static sluice_take_t *fresh(sluice_take_t **t)
{
	if (!*t) {
		*t = sluice_take_new();
		if (!*t || ntakes == 64)
			abort();
		takes[ntakes++] = *t;
	}
	(*t)->nmatches = 0;
	return *t;
}

/* --------------------------------------------------------------- tests */

static void test_one_rule_charges_and_reports(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_backend_t be = memory_backend(m);
	static sluice_take_t *t;

	fresh(&t);
	add(t, "tight", "a");
	decide(&be, t);
	CHECK(calls == 1);
	CHECK(got.allowed && got.status == 0 && got.report == 0);
	CHECK_EQ_U64(got.summary.remaining, 1);
	decide(&be, t);
	decide(&be, t);
	CHECK(!got.allowed);
	CHECK(t->results[0].outcome == SLUICE_OUT_LIMITED);
	sluice_memstore_free(m);
}

static void test_rejected_request_charges_no_rule(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_backend_t be = memory_backend(m);
	static sluice_take_t *t, *peek;
	int i;

	for (i = 0; i < 3; i++) {
		fresh(&t);
		add(t, "loose", "u");
		add(t, "tight", "u");
		decide(&be, t);
		CHECK(calls == 1);
	}
	CHECK(!got.allowed);
	CHECK(got.report == 1); /* tight rejected */
	CHECK(t->results[0].outcome == SLUICE_OUT_SKIPPED);
	CHECK(t->results[1].outcome == SLUICE_OUT_LIMITED);
	CHECK(got.summary.retry_after_us > 0);
	/* loose was charged twice, not three times; its second limit (3 at
	 * 1/h) is the one reported. */
	fresh(&peek);
	add(peek, "loose", "u");
	peek->costs[0] = 0;
	decide(&be, peek);
	CHECK_EQ_U64(got.summary.remaining, 1);
	CHECK_EQ_U64(got.which, 1);
	sluice_memstore_free(m);
}

static void test_fail_open_allows_without_decision(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_backend_t be = {&failing_ops, NULL, m};
	static sluice_take_t *t;

	fresh(&t);
	add(t, "open", "x");
	decide(&be, t);
	CHECK(calls == 1);
	CHECK(got.allowed && got.status == 0 && got.report < 0);
	CHECK(t->results[0].store_err);
	CHECK(t->results[0].outcome == SLUICE_OUT_ERROR_OPEN);
	CHECK(!sluice_backend_healthy(&be));
	sluice_memstore_free(m);
}

static void test_fail_closed_is_a_store_error(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_backend_t be = {&failing_ops, NULL, m};
	static sluice_take_t *t;

	fresh(&t);
	add(t, "open", "x");
	add(t, "closed", "x");
	decide(&be, t);
	CHECK(calls == 1);
	CHECK(!got.allowed && got.status == SLUICE_ESTORE);
	CHECK(t->results[1].outcome == SLUICE_OUT_ERROR_CLOSED);
	sluice_memstore_free(m);
}

static void test_fail_local_decides_on_the_local_store(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_backend_t be = {&failing_ops, NULL, m};
	static sluice_take_t *t;
	int i;

	for (i = 0; i < 6; i++) {
		fresh(&t);
		add(t, "local", "x");
		decide(&be, t);
		CHECK(calls == 1);
		CHECK(t->results[0].local && t->results[0].store_err);
		CHECK(got.allowed == (i < 5));
	}
	CHECK(got.report == 0);
	sluice_memstore_free(m);
}

static void test_shadow_never_rejects_nor_fails_closed(void)
{
	sluice_memstore_t *m = open_memstore(100);
	sluice_backend_t be = memory_backend(m), bad = {&failing_ops, NULL, m};
	static sluice_take_t *t;
	int i;

	for (i = 0; i < 3; i++) {
		fresh(&t);
		add(t, "shadow", "s");
		decide(&be, t);
		CHECK(got.allowed);
	}
	CHECK(t->results[0].outcome == SLUICE_OUT_LIMITED);
	CHECK(got.report == 0 && !got.summary.allowed); /* reported */
	fresh(&t);
	add(t, "shadow", "s");
	decide(&bad, t);
	CHECK(got.allowed && got.status == 0);
	sluice_memstore_free(m);
}

static void test_deferred_driver_answers_once_after_every_take(void)
{
	static deferred_t d;
	sluice_backend_t be = {&deferred_ops, &d, NULL};
	static sluice_take_t *t;
	int i;

	d.store = open_memstore(100);
	for (i = 0; i < 3; i++) {
		fresh(&t);
		add(t, "tight", "d");
		add(t, "loose", "d");
		add(t, "shadow", "d");
		decide(&be, t);
		CHECK(calls == 0);
		/* One take for both enforcing rules, one for the shadow. */
		CHECK_EQ_U64(deferred_run(&d), 2);
		CHECK(calls == 1);
		CHECK_EQ_U64(d.n, 0);
		CHECK(got.allowed == (i < 2));
	}
	CHECK(t->results[1].outcome == SLUICE_OUT_SKIPPED);
	sluice_memstore_free(d.store);
}

int main(void)
{
	char err[512];

	cfg = sluice_config_parse("test.yaml", yaml, sizeof(yaml) - 1, err,
				  sizeof(err));
	if (!cfg) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	RUN(test_one_rule_charges_and_reports);
	RUN(test_rejected_request_charges_no_rule);
	RUN(test_fail_open_allows_without_decision);
	RUN(test_fail_closed_is_a_store_error);
	RUN(test_fail_local_decides_on_the_local_store);
	RUN(test_shadow_never_rejects_nor_fails_closed);
	RUN(test_deferred_driver_answers_once_after_every_take);
	while (ntakes)
		sluice_take_free(takes[--ntakes]);
	sluice_config_free(cfg);
	TESTS_DONE();
}
