/*
 * test_request.c -- a front end's request decided in one call
 * (policy/request.h): the original request as `proxy:` describes it, the
 * answer's kind, headers and body, the thread's counters, the thread's
 * take lent to one request at a time, a direct request (a module inside
 * the server) and an answer kept past its callback.
 */
#include "check.h"
#include "policy/request.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

/* A request's header fields: name, value pairs, a name may repeat. */
typedef struct fields_s {
	const char *kv[8];
	size_t n;
} fields_t;

static const char *line(void *ctx, const char *name, size_t index, size_t *len)
{
	const fields_t *f = ctx;
	size_t i;

	for (i = 0; i + 1 < f->n; i += 2)
		if (strcmp(f->kv[i], name) == 0 && index-- == 0) {
			*len = strlen(f->kv[i + 1]);
			return f->kv[i + 1];
		}
	return NULL;
}

static const char *header(void *ctx, const char *name, size_t *len)
{
	return line(ctx, name, 0, len);
}

static sluice_svc_t svc;
static sluice_memstore_t *store;
static struct sockaddr_in peer;

static int nanswers;
static sluice_answer_kind_t kind;
static int had_take;
static sluice_buf_t headers, body;

static void on_answer(void *arg, const sluice_answer_t *a)
{
	(void)arg;
	nanswers++;
	kind = a->kind;
	had_take = a->take != NULL;
	sluice_buf_free(&headers);
	sluice_buf_free(&body);
	sluice_answer_headers(a, &headers);
	if (a->kind == SLUICE_ANSWER_LIMITED)
		sluice_answer_limited_body(a, &body);
	sluice_buf_append(&headers, "", 1); /* NUL-terminated to search */
	sluice_buf_append(&body, "", 1);
}

/* /api (exactly) per user, two in an instant; `proxy: nginx` (the default). */
static void start(void)
{
	static const char yaml[] = "rules:\n"
				   "  - name: api\n"
				   "    match: {path: \"/api\"}\n"
				   "    key: [\"header:x-user-id\"]\n"
				   "    limits: [{capacity: 2, rate: 1/min}]\n";
	char err[256];
	sluice_config_t *cfg = sluice_config_parse(
		"request.yaml", yaml, strlen(yaml), err, sizeof(err));

	CHECK(cfg != NULL);
	CHECK(sluice_memstore_open(&store, 1000, err, sizeof(err)) == 0);
	memset(&svc, 0, sizeof(svc));
	sluice_backend_memory(&svc.backend, store);
	CHECK((svc.live = sluice_live_new(cfg)) != NULL);
	CHECK((svc.metrics = sluice_metrics_new()) != NULL);
	svc.spare = sluice_take_new();
	CHECK(svc.spare != NULL);
	memset(&peer, 0, sizeof(peer));
	peer.sin_family = AF_INET;
	inet_pton(AF_INET, "192.0.2.9", &peer.sin_addr);
	nanswers = 0;
}

static void stop(void)
{
	CHECK(!svc.spare_lent);
	sluice_take_free(svc.spare);
	sluice_live_unref(svc.live);
	sluice_memstore_free(store);
	sluice_buf_free(&headers);
	sluice_buf_free(&body);
}

/* GET path with the fields given. */
static void get(sluice_request_t *req, const char *path, fields_t *f)
{
	memset(req, 0, sizeof(*req));
	req->method = "GET";
	req->method_len = 3;
	req->path = path;
	req->path_len = strlen(path);
	req->header = header;
	req->header_line = line;
	req->header_ctx = f;
	req->peer = (const struct sockaddr *)&peer;
}

/* The check request itself: GET /v1/check with the fields given. */
static int check(fields_t *f, sluice_decide_error_t *err)
{
	sluice_request_t req;

	get(&req, "/v1/check", f);
	return sluice_decide_request(&svc, svc.live, &req, 1000000000,
				     on_answer, NULL, err);
}

/* The URI the proxy sends decides which rule applies (its query is not
 * the path), the third request is refused with the rule's headers and
 * body, and each outcome is counted in the thread's counters. */
static void test_the_proxy_uri_is_decided_and_answered(void)
{
	fields_t f = {{"x-original-uri", "/api?page=2", "x-user-id", "alice"},
		      4};
	sluice_decide_error_t err;
	uint16_t slot;
	int i;

	start();
	slot = svc.live->slots[0];
	for (i = 0; i < 2; i++) {
		CHECK(check(&f, &err) == 0);
		CHECK(kind == SLUICE_ANSWER_ALLOWED && had_take);
		CHECK(strstr(headers.data, "X-RateLimit-Limit: 2\r\n"));
	}
	CHECK(check(&f, &err) == 0);
	CHECK_EQ_U64(nanswers, 3);
	CHECK(kind == SLUICE_ANSWER_LIMITED);
	CHECK(strstr(headers.data, "X-RateLimit-Remaining: 0\r\n"));
	CHECK(strstr(headers.data, "Retry-After: "));
	CHECK(strstr(body.data, "\"error\":\"rate_limited\""));
	CHECK(strstr(body.data, "\"policy\":\"api\""));
	CHECK_EQ_U64(svc.metrics->decisions[slot][SLUICE_RESULT_ALLOWED], 2);
	CHECK_EQ_U64(svc.metrics->decisions[slot][SLUICE_RESULT_LIMITED], 1);
	stop();
}

/* A URI no rule matches is allowed at once with no headers: nothing
 * charged, so the same user's /api budget is whole afterwards. */
static void test_no_rule_allows_with_nothing_to_say(void)
{
	fields_t f = {{"x-original-uri", "/static/a.css", "x-user-id", "bob"},
		      4};
	fields_t api = {{"x-original-uri", "/api", "x-user-id", "bob"}, 4};
	sluice_decide_error_t err;
	int i;

	start();
	for (i = 0; i < 5; i++) {
		CHECK(check(&f, &err) == 0);
		CHECK(kind == SLUICE_ANSWER_ALLOWED && !had_take);
		CHECK_EQ_U64(headers.len, 1);
	}
	CHECK(check(&api, &err) == 0);
	CHECK(kind == SLUICE_ANSWER_ALLOWED);
	CHECK(strstr(headers.data, "X-RateLimit-Remaining: 1\r\n"));
	stop();
}

/* A client that adds its own X-Original-URI beside the proxy's picks no
 * path: the request is refused naming the header, and nothing is
 * charged or answered. */
static void test_a_second_uri_line_is_refused(void)
{
	fields_t f = {{"x-original-uri", "/static/x", "x-original-uri", "/api",
		       "x-user-id", "carol"},
		      6};
	sluice_decide_error_t err;

	start();
	CHECK(check(&f, &err) == SLUICE_EINVAL);
	CHECK(err.field && strcmp(err.field, "x-original-uri") == 0);
	CHECK(err.message != NULL);
	CHECK_EQ_U64(nanswers, 0);
	CHECK(!svc.spare_lent);
	stop();
}

/* The thread's take goes to one request at a time; another borrower gets
 * a take of its own, which goes when it is given back. */
static void test_the_threads_take_is_lent_once(void)
{
	sluice_take_t *a, *b;

	start();
	a = sluice_take_get(&svc);
	CHECK(a == svc.spare && svc.spare_lent);
	b = sluice_take_get(&svc);
	CHECK(b != NULL && b != a);
	sluice_take_put(&svc, b);
	CHECK(svc.spare_lent);
	sluice_take_put(&svc, a);
	CHECK(!svc.spare_lent);
	CHECK(sluice_take_get(&svc) == a);
	sluice_take_put(&svc, a);
	stop();
}

/* A module inside the server (nginx's sluice_config) decides the
 * request itself: a client's X-Original-URI, even on two lines, picks
 * nothing; its own path without the query is decided; no counters. */
static void test_a_direct_request_reads_no_proxy_header(void)
{
	fields_t f = {{"x-original-uri", "/static/x", "x-original-uri",
		       "/static/y", "x-user-id", "dave"},
		      6};
	sluice_metrics_t *m;
	sluice_decide_error_t err;
	sluice_request_t req;
	int i;

	start();
	m = svc.metrics;
	svc.metrics = NULL;
	get(&req, "/api?page=2", &f);
	req.direct = 1;
	for (i = 0; i < 3; i++)
		CHECK(sluice_decide_request(&svc, svc.live, &req, 1000000000,
					    on_answer, NULL, &err) == 0);
	CHECK_EQ_U64(nanswers, 3);
	CHECK(kind == SLUICE_ANSWER_LIMITED);
	CHECK_EQ_U64(m->decisions[svc.live->slots[0]][SLUICE_RESULT_ALLOWED],
		     0);
	svc.metrics = m;
	stop();
}

static sluice_answer_t kept;

static void on_keep(void *arg, const sluice_answer_t *a)
{
	(void)arg;
	nanswers++;
	sluice_answer_keep(a, &kept);
}

/* A front end that keeps its answer past the callback (nginx, whose own
 * limits may refuse the request after the rules allowed it) reads the
 * reported decision later and gives its tokens back; the thread's take
 * is its until released. */
static void test_a_kept_answer_gives_its_tokens_back(void)
{
	fields_t f = {{"x-original-uri", "/api", "x-user-id", "erin"}, 4};
	sluice_decide_error_t err;
	sluice_request_t req;
	char name[64];
	int i;

	start();
	get(&req, "/v1/check", &f);
	/* Refunded every time: five requests on a budget of two. */
	for (i = 0; i < 5; i++) {
		CHECK(sluice_decide_request(&svc, svc.live, &req, 1000000000,
					    on_keep, NULL, &err) == 0);
		CHECK(kept.kind == SLUICE_ANSWER_ALLOWED && kept.take);
		CHECK(svc.spare_lent);
		CHECK(sluice_answer_decision(&kept) != NULL);
		CHECK_EQ_U64(sluice_answer_decision(&kept)->remaining, 1);
		sluice_answer_refund(&kept, 1000000000);
		sluice_answer_release(&kept);
		CHECK(!svc.spare_lent && kept.take == NULL);
	}
	/* Kept and not refunded: the third is refused, and says by whom
	 * and for how long. */
	for (i = 0; i < 3; i++) {
		CHECK(sluice_decide_request(&svc, svc.live, &req, 1000000000,
					    on_keep, NULL, &err) == 0);
		if (i < 2)
			sluice_answer_release(&kept);
	}
	CHECK(kept.kind == SLUICE_ANSWER_LIMITED);
	sluice_answer_policy(&kept, name, sizeof(name));
	CHECK(strcmp(name, "api") == 0);
	CHECK(sluice_answer_retry_us(&kept) > 0);
	sluice_answer_release(&kept);
	CHECK_EQ_U64(nanswers, 8);
	stop();
}

int main(void)
{
	RUN(test_the_proxy_uri_is_decided_and_answered);
	RUN(test_no_rule_allows_with_nothing_to_say);
	RUN(test_a_second_uri_line_is_refused);
	RUN(test_the_threads_take_is_lent_once);
	RUN(test_a_direct_request_reads_no_proxy_header);
	RUN(test_a_kept_answer_gives_its_tokens_back);
	TESTS_DONE();
}
