/*
 * test_policy_lib.c -- the policy engine is a library of its own.
 *
 * This executable links libsluice_policy alone (CMakeLists.txt): no HTTP,
 * gRPC or simulator object.  A front end that is none of those (the nginx
 * module) gets the whole request path from it: a config parsed from YAML,
 * the rules matched, the verdict decided on a store, and the answer's
 * headers composed.  If the engine ever needs a front end's symbol again,
 * this test stops linking.
 */
#include "check.h"
#include "policy/ratelimit_headers.h"
#include "policy/verdict.h"
#include "util/buf.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

static const char *lookup(void *ctx, const char *name, size_t *len)
{
	const char *user = ctx;

	if (strcmp(name, "x-user-id") != 0 || !user)
		return NULL;
	*len = strlen(user);
	return user;
}

static int nallowed;
static sluice_verdict_t last;

static void on_verdict(void *arg, const sluice_verdict_t *v)
{
	(void)arg;
	nallowed += v->allowed;
	last = *v;
}

/* A rule from YAML decides on the memory store, all inside the engine:
 * the third request in one instant is refused and told when to retry. */
static void test_engine_decides_without_a_front_end(void)
{
	static const char yaml[] = "rules:\n"
				   "  - name: api\n"
				   "    match: {path: \"/api\"}\n"
				   "    key: [\"header:x-user-id\"]\n"
				   "    limits: [{capacity: 2, rate: 1/min}]\n";
	char err[256];
	sluice_config_t *cfg = sluice_config_parse(
		"lib.yaml", yaml, strlen(yaml), err, sizeof(err));
	sluice_memstore_t *m = NULL;
	sluice_take_t *t = sluice_take_new();
	sluice_backend_t be;
	sluice_request_t req;
	struct sockaddr_in peer;
	int64_t now = 1000000000;
	int i;

	CHECK(cfg != NULL);
	CHECK(sluice_memstore_open(&m, 1000, err, sizeof(err)) == 0);
	CHECK(t != NULL);
	sluice_backend_memory(&be, m);
	memset(&peer, 0, sizeof(peer));
	peer.sin_family = AF_INET;
	inet_pton(AF_INET, "192.0.2.9", &peer.sin_addr);
	memset(&req, 0, sizeof(req));
	req.method = "GET";
	req.method_len = 3;
	req.path = "/api";
	req.path_len = 4;
	req.header = lookup;
	req.header_ctx = (void *)"alice";
	req.peer = (const struct sockaddr *)&peer;

	nallowed = 0;
	for (i = 0; i < 3; i++) {
		CHECK(sluice_take_match(t, cfg, &req) == 0);
		CHECK_EQ_U64(t->nmatches, 1);
		sluice_verdict_decide(&be, t, now, on_verdict, NULL);
	}
	CHECK_EQ_U64(nallowed, 2);
	CHECK(!last.allowed);
	/* One token of 1/min: 60 s to the next one. */
	CHECK_EQ_U64(last.summary.retry_after_us, 60000000);

	sluice_take_free(t);
	sluice_memstore_free(m);
	sluice_config_free(cfg);
}

/* The answer's headers come from the engine too. */
static void test_engine_composes_the_headers(void)
{
	sluice_limit_t limit;
	sluice_decision_t d;
	sluice_buf_t out;
	char err[128];

	memset(&d, 0, sizeof(d));
	CHECK(sluice_limit_parse(&limit, "10", "1/s", err, sizeof(err)) == 0);
	d.allowed = 0;
	d.limit = 10;
	d.remaining = 0;
	d.retry_after_us = 1500000;
	d.reset_after_us = 10000000;
	memset(&out, 0, sizeof(out));
	sluice_ratelimit_headers(&out, "api", &limit, &d, 1);
	CHECK(out.len > 0);
	CHECK(memmem(out.data, out.len, "Retry-After: 2\r\n", 16) != NULL);
	CHECK(memmem(out.data, out.len, "X-RateLimit-Limit: 10\r\n", 23) !=
	      NULL);
	sluice_buf_free(&out);
}

/* A front end with limits of its own (the nginx module's sluice_limit)
 * gives back what an allowed verdict charged when those refuse: the
 * enforcing rule's tokens return, the shadow rule's count stays; and the
 * answer's header lines are the enforcing rule's, never a shadow one's. */
static void test_refund_and_header_lines(void)
{
	static const char yaml[] = "rules:\n"
				   "  - name: api\n"
				   "    limits: [{capacity: 2, rate: 1/min}]\n"
				   "  - name: seen\n"
				   "    shadow: true\n"
				   "    limits: [{capacity: 1, rate: 1/min}]\n";
	char err[256];
	sluice_config_t *cfg = sluice_config_parse(
		"lib.yaml", yaml, strlen(yaml), err, sizeof(err));
	sluice_memstore_t *m = NULL;
	sluice_take_t *t = sluice_take_new();
	sluice_backend_t be;
	sluice_request_t req;
	struct sockaddr_in peer;
	sluice_buf_t out;
	int64_t now = 1000000000;
	int i;

	CHECK(cfg != NULL);
	CHECK(sluice_memstore_open(&m, 1000, err, sizeof(err)) == 0);
	sluice_backend_memory(&be, m);
	memset(&peer, 0, sizeof(peer));
	peer.sin_family = AF_INET;
	inet_pton(AF_INET, "192.0.2.9", &peer.sin_addr);
	memset(&req, 0, sizeof(req));
	req.method = "GET";
	req.method_len = 3;
	req.path = "/";
	req.path_len = 1;
	req.header = lookup;
	req.peer = (const struct sockaddr *)&peer;

	/* Ten requests, each allowed and then given back: none is kept. */
	nallowed = 0;
	for (i = 0; i < 10; i++) {
		CHECK(sluice_take_match(t, cfg, &req) == 0);
		CHECK_EQ_U64(t->nmatches, 2);
		sluice_verdict_decide(&be, t, now, on_verdict, NULL);
		CHECK(last.allowed);
		memset(&out, 0, sizeof(out));
		sluice_verdict_header_lines(&out, t, &t->verdict);
		CHECK(memmem(out.data, out.len, "X-RateLimit-Limit: 2\r\n",
			     22) != NULL);
		CHECK(memmem(out.data, out.len, "\"seen\"", 6) == NULL);
		sluice_buf_free(&out);
		sluice_verdict_refund(&be, t, now);
	}
	CHECK_EQ_U64(nallowed, 10);
	/* The rule still holds both tokens; the shadow rule is drained. */
	CHECK(sluice_take_match(t, cfg, &req) == 0);
	sluice_verdict_decide(&be, t, now, on_verdict, NULL);
	CHECK(last.allowed);
	CHECK_EQ_U64(t->results[0].d.remaining, 1);
	CHECK_EQ_U64(t->results[1].outcome, SLUICE_OUT_LIMITED);

	sluice_take_free(t);
	sluice_memstore_free(m);
	sluice_config_free(cfg);
}

int main(void)
{
	RUN(test_engine_decides_without_a_front_end);
	RUN(test_engine_composes_the_headers);
	RUN(test_refund_and_header_lines);
	TESTS_DONE();
}
