/*
 * test_conn.c -- the connection state machine without sockets: pipelined
 * requests answered in order across asynchronous decisions, reads held
 * back while a decision is pending, limits, and a connection released
 * while its decision is still in flight.
 */
#include "check.h"
#include "fake_store.h"
#include "serve/conn.h"

#include <arpa/inet.h>
#include <string.h>

static deferred_t store;
static sluice_svc_t svc;
static int wakes, releases;

static void on_wake(sluice_conn_t *c)
{
	wakes++;
}

static void on_release(sluice_conn_t *c)
{
	releases++;
	free(c); /* as the transport does: ASan sees any later use */
}

static const sluice_conn_io_t io = {.wake = on_wake, .release = on_release};

static void conn_init(sluice_conn_t *c)
{
	struct sockaddr_in peer;

	memset(&peer, 0, sizeof(peer));
	peer.sin_family = AF_INET;
	peer.sin_addr.s_addr = htonl(0xc0000201); /* 192.0.2.1 */
	sluice_conn_init(c, &svc, &io, (const struct sockaddr *)&peer);
	wakes = releases = 0;
}

static void feed(sluice_conn_t *c, const char *s)
{
	sluice_conn_feed(c, s, strlen(s));
}

/* Number of complete answers in out, and the status of the i-th. */
static int count_answers(const sluice_conn_t *c, int *statuses, int max)
{
	const char *p = c->out.data, *end = p + c->out.len;
	int n = 0;

	while (p && p < end && n < max) {
		const char *next =
			memmem(p + 1, (size_t)(end - p - 1), "HTTP/1.1 ", 9);

		statuses[n++] = atoi(p + 9);
		p = next;
	}
	return n;
}

static const char check_req[] =
	"GET /v1/check HTTP/1.1\r\nx-user-id: pipe\r\n\r\n";

static void test_pipelined_checks_wait_for_each_decision(void)
{
	static sluice_conn_t c;
	char three[sizeof(check_req) * 3 + 64];
	int st[8];

	conn_init(&c);
	snprintf(three, sizeof(three), "%s%s%sGET /healthz HTTP/1.1\r\n\r\n",
		 check_req, check_req, check_req);
	feed(&c, three);
	/* The first request waits on the store; the rest are held back. */
	CHECK(sluice_conn_waiting(&c));
	CHECK_EQ_U64(c.out.len, 0);
	CHECK(c.in.len > 0);
	CHECK_EQ_U64(deferred_run(&store), 1);
	CHECK_EQ_U64(wakes, 1);
	CHECK(!sluice_conn_waiting(&c));
	CHECK_EQ_U64(count_answers(&c, st, 8), 1);
	sluice_conn_resume(&c); /* what the transport does on wake */
	CHECK(sluice_conn_waiting(&c));
	CHECK_EQ_U64(deferred_run(&store), 1);
	sluice_conn_resume(&c);
	CHECK_EQ_U64(deferred_run(&store), 1);
	sluice_conn_resume(&c); /* /healthz answers at once */
	CHECK(!sluice_conn_waiting(&c));
	CHECK_EQ_U64(count_answers(&c, st, 8), 4);
	CHECK(st[0] == 200 && st[1] == 200 && st[2] == 200 && st[3] == 200);
	CHECK(memmem(c.out.data, c.out.len, "Remaining: 97", 13) != NULL);
	CHECK(!c.want_close);
	CHECK(sluice_conn_release(&c));
}

static void test_bytes_arriving_while_waiting_are_kept(void)
{
	static sluice_conn_t c;
	int st[8];

	conn_init(&c);
	feed(&c, check_req);
	CHECK(sluice_conn_waiting(&c));
	feed(&c, "GET /healthz HTTP/1.1\r\n");
	feed(&c, "Connection: close\r\n\r\n");
	CHECK_EQ_U64(deferred_run(&store), 1);
	sluice_conn_resume(&c);
	CHECK_EQ_U64(count_answers(&c, st, 8), 2);
	CHECK(c.want_close);
	CHECK(sluice_conn_release(&c));
}

static void test_released_while_waiting_is_freed_by_the_answer(void)
{
	static const char take_req[] =
		"POST /v1/take HTTP/1.1\r\nContent-Length: 37\r\n\r\n"
		"{\"key\":\"r\",\"capacity\":1,\"rate\":\"1/s\"}";
	const char *reqs[2] = {check_req, take_req};
	int i;

	for (i = 0; i < 2; i++) {
		sluice_conn_t *c = malloc(sizeof(*c));

		conn_init(c);
		feed(c, reqs[i]);
		CHECK(sluice_conn_waiting(c));
		/* The transport is gone while the decision is pending. */
		CHECK(!sluice_conn_release(c));
		CHECK_EQ_U64(releases, 0);
		CHECK_EQ_U64(deferred_run(&store), 1);
		CHECK_EQ_U64(releases, 1);
		CHECK_EQ_U64(wakes, 0);
	}
}

static void test_limits_and_errors_close(void)
{
	static sluice_conn_t c;
	char big[12000];
	int st[4];

	conn_init(&c);
	memset(big, 'a', sizeof(big));
	memcpy(big, "GET / HTTP/1.1\r\nx: ", 19);
	big[sizeof(big) - 1] = '\0';
	feed(&c, big);
	CHECK(c.want_close);
	CHECK_EQ_U64(count_answers(&c, st, 4), 1);
	CHECK_EQ_U64(st[0], 431);
	CHECK(sluice_conn_release(&c));

	conn_init(&c);
	feed(&c, "POST /v1/take HTTP/1.1\r\nContent-Length: 99999\r\n\r\n");
	CHECK(c.want_close);
	CHECK_EQ_U64(count_answers(&c, st, 4), 1);
	CHECK_EQ_U64(st[0], 413);
	CHECK(sluice_conn_release(&c));

	conn_init(&c);
	feed(&c, "GET /healthz HTTP/1.1\r\n\r\nBLAH\r\n\r\n");
	CHECK(c.want_close);
	CHECK_EQ_U64(count_answers(&c, st, 4), 2);
	CHECK(st[0] == 200 && st[1] == 400);
	CHECK(sluice_conn_release(&c));
}

static void test_expect_continue_gets_a_go_ahead(void)
{
	static sluice_conn_t c;
	int st[4];

	conn_init(&c);
	feed(&c, "POST /v1/take HTTP/1.1\r\nExpect: 100-continue\r\n"
		 "Content-Length: 40\r\n\r\n");
	CHECK_EQ_U64(count_answers(&c, st, 4), 1);
	CHECK_EQ_U64(st[0], 100);
	feed(&c, "{\"key\":\"k\",\"capacity\":2,\"rate\":\"1/s\"}   ");
	CHECK(sluice_conn_waiting(&c));
	CHECK_EQ_U64(deferred_run(&store), 1);
	CHECK_EQ_U64(count_answers(&c, st, 4), 2);
	CHECK_EQ_U64(st[1], 200);
	CHECK(sluice_conn_release(&c));
}

/* One rule, so that each decision is one store call for deferred_run(). */
static const char one_rule[] = "rules:\n"
			       "  - name: default\n"
			       "    key: [\"header:x-user-id\", ip]\n"
			       "    limits: [{capacity: 100, rate: 2/s}]\n";

int main(void)
{
	store.store = sluice_memstore_new(1000);
	svc.live = sluice_live_new(sluice_config_parse(
		"t.yaml", one_rule, sizeof(one_rule) - 1, NULL, 0));
	svc.metrics = sluice_metrics_new();
	svc.backend.ops = &deferred_ops;
	svc.backend.impl = &store;
	svc.backend.local = store.store;
	RUN(test_pipelined_checks_wait_for_each_decision);
	RUN(test_bytes_arriving_while_waiting_are_kept);
	RUN(test_released_while_waiting_is_freed_by_the_answer);
	RUN(test_limits_and_errors_close);
	RUN(test_expect_continue_gets_a_go_ahead);
	free(svc.spare);
	sluice_live_unref(svc.live);
	sluice_memstore_free(store.store);
	TESTS_DONE();
}
