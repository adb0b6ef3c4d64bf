/*
 * test_conn.c -- the connection state machine without sockets: pipelined
 * requests answered in order across asynchronous decisions, reads held
 * back while a decision is pending, limits, and a connection released
 * while its decision is still in flight.
 */
#include "check.h"
#include "fake_store.h"
#include "serve/http_conn.h"
#include "stores.h"

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
	"GET /v1/check HTTP/1.1\r\nHost: x\r\nx-user-id: pipe\r\n\r\n";

static void test_pipelined_checks_wait_for_each_decision(void)
{
	static sluice_conn_t c;
	char three[sizeof(check_req) * 3 + 64];
	int st[8];

	conn_init(&c);
	snprintf(three, sizeof(three),
		 "%s%s%sGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", check_req,
		 check_req, check_req);
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
	feed(&c, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
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
		"POST /v1/take HTTP/1.1\r\nHost: x\r\nContent-Length: "
		"37\r\n\r\n"
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
	feed(&c, "POST /v1/take HTTP/1.1\r\nHost: x\r\nContent-Length: "
		 "99999\r\n\r\n");
	CHECK(c.want_close);
	CHECK_EQ_U64(count_answers(&c, st, 4), 1);
	CHECK_EQ_U64(st[0], 413);
	CHECK(sluice_conn_release(&c));

	conn_init(&c);
	feed(&c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nBLAH\r\n\r\n");
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
	feed(&c, "POST /v1/take HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
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

/* ------------------------------------------------- HTTP/1.1 conformance */

/* Feeds one request and returns the status of the single answer, or 0
 * when there is no answer; *closed tells whether the connection ends. */
static int status_of(const char *req, size_t len, int *closed)
{
	static sluice_conn_t c;
	int st[4], n;

	conn_init(&c);
	sluice_conn_feed(&c, req, len);
	if (sluice_conn_waiting(&c))
		deferred_run(&store);
	n = count_answers(&c, st, 4);
	if (closed)
		*closed = c.want_close;
	if (!sluice_conn_release(&c))
		return -1;
	return n == 1 ? st[0] : 0;
}

static int status_str(const char *req, int *closed)
{
	return status_of(req, strlen(req), closed);
}

/* Each request of the table gets `status` and the connection closes. */
#define EXPECT_EACH(table, status)                                             \
	do {                                                                   \
		size_t i_;                                                     \
		int closed_;                                                   \
                                                                               \
		for (i_ = 0; i_ < sizeof(table) / sizeof(table[0]); i_++) {    \
			CHECK_EQ_U64(status_str(table[i_], &closed_), status); \
			CHECK(closed_);                                        \
		}                                                              \
	} while (0)

static void test_http11_needs_exactly_one_host(void)
{
	int closed;

	CHECK_EQ_U64(status_str("GET /healthz HTTP/1.1\r\n\r\n", &closed), 400);
	CHECK(closed);
	CHECK_EQ_U64(status_str("GET /healthz HTTP/1.1\r\nHost: a\r\n"
				"Host: b\r\n\r\n",
				&closed),
		     400);
	CHECK(closed);
	CHECK_EQ_U64(status_str("GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n",
				&closed),
		     400);
	CHECK(closed);
	CHECK_EQ_U64(
		status_str("GET /healthz HTTP/1.1\r\nHost: a/b\r\n\r\n", NULL),
		400);
	CHECK_EQ_U64(status_str("GET /healthz HTTP/1.1\r\nHost: [::1]:80\r\n"
				"\r\n",
				NULL),
		     200);
	CHECK_EQ_U64(status_str("GET /healthz HTTP/1.1\r\nHost:\r\n\r\n", NULL),
		     200);
	CHECK_EQ_U64(status_str("GET /healthz HTTP/1.0\r\n\r\n", NULL), 200);
	CHECK_EQ_U64(
		status_str("GET /healthz HTTP/1.1\r\nhOsT: a\r\n\r\n", &closed),
		200);
	CHECK(!closed);
}

static void test_space_before_colon_is_400(void)
{
	static const char *const bad[] = {
		"GET /v1/check HTTP/1.1\r\nHost: x\r\nx-user-id : v\r\n\r\n",
		"GET /v1/check HTTP/1.1\r\nHost: x\r\nx-user-id\t: v\r\n\r\n",
		"GET /v1/check HTTP/1.1\r\n x-user-id: v\r\nHost: x\r\n\r\n",
		"GET /v1/check HTTP/1.1\r\nHost: x\r\nx(id): v\r\n\r\n",
		"GET /v1/check HTTP/1.1\r\nHost: x\r\nx/id: v\r\n\r\n",
		"GET /v1/check HTTP/1.1\r\nHost: x\r\nx\"id: v\r\n\r\n",
	};
	EXPECT_EACH(bad, 400);
	CHECK_EQ_U64(status_str("GET /healthz HTTP/1.1\r\nHost: x\r\n"
				"x-A_b.c~!#$%&'*+^`|9: v\r\n\r\n",
				NULL),
		     200);
}

/* An obs-fold line is refused wherever the reads split the bytes, and a
 * value with spaces inside is not mistaken for one. */
static void test_obs_fold_is_400_however_the_bytes_arrive(void)
{
	static const char fold[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n"
				   "x-a: v1\r\n v2\r\n\r\n";
	static const char plain[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n"
				    "x-a: v1  v2 \r\nx-b: w\r\n\r\n";
	static sluice_conn_t c;
	size_t cut;
	int st[4];

	for (cut = 0; cut < (sizeof(fold) - 1) * (sizeof(fold) - 1); cut++) {
		size_t a = cut / (sizeof(fold) - 1),
		       b = cut % (sizeof(fold) - 1);

		if (b < a)
			continue;
		conn_init(&c); /* in three reads, cut at a and b */
		sluice_conn_feed(&c, fold, a);
		sluice_conn_feed(&c, fold + a, b - a);
		sluice_conn_feed(&c, fold + b, sizeof(fold) - 1 - b);
		CHECK_EQ_U64(count_answers(&c, st, 4), 1);
		CHECK_EQ_U64(st[0], 400);
		CHECK(c.want_close);
		CHECK(sluice_conn_release(&c));
	}
	for (cut = 0; cut < (sizeof(plain) - 1) * (sizeof(plain) - 1); cut++) {
		size_t a = cut / (sizeof(plain) - 1),
		       b = cut % (sizeof(plain) - 1), len = 0;
		const char *v;

		if (b < a)
			continue;
		conn_init(&c);
		sluice_conn_feed(&c, plain, a);
		sluice_conn_feed(&c, plain + a, b - a);
		sluice_conn_feed(&c, plain + b, sizeof(plain) - 1 - b);
		CHECK_EQ_U64(count_answers(&c, st, 4), 1);
		CHECK_EQ_U64(st[0], 200);
		v = sluice_conn_header(&c, "x-a", &len);
		CHECK(v && len >= 6 && memcmp(v, "v1  v2", 6) == 0);
		CHECK(sluice_conn_release(&c));
	}
	CHECK_EQ_U64(status_str("GET /healthz HTTP/1.1\r\nHost: x\r\n"
				"x-a: v1\r\n\tv2\r\n\r\n",
				NULL),
		     400);
	/* One byte a read. */
	for (cut = 0; cut < 2; cut++) {
		const char *req = cut ? plain : fold;
		size_t i, len = strlen(req);

		conn_init(&c);
		for (i = 0; i < len && !c.want_close; i++)
			sluice_conn_feed(&c, req + i, 1);
		CHECK_EQ_U64(count_answers(&c, st, 4), 1);
		CHECK_EQ_U64(st[0], cut ? 200 : 400);
		CHECK(sluice_conn_release(&c));
	}
}

static void test_absolute_form_is_routed_by_its_path(void)
{
	static sluice_conn_t c;
	int st[4];

	CHECK_EQ_U64(status_str("GET http://h/healthz HTTP/1.1\r\nHost: h\r\n"
				"\r\n",
				NULL),
		     200);
	CHECK_EQ_U64(status_str("GET HTTPS://h:8080/healthz?a=b#f HTTP/1.1\r\n"
				"Host: h\r\n\r\n",
				NULL),
		     200);
	CHECK_EQ_U64(
		status_str("GET http://h HTTP/1.1\r\nHost: h\r\n\r\n", NULL),
		404);
	CHECK_EQ_U64(status_str("GET ftp://h/healthz HTTP/1.1\r\nHost: h\r\n"
				"\r\n",
				NULL),
		     400);
	/* The decision is the one a plain path gets: same bucket. */
	conn_init(&c);
	feed(&c, "GET http://h/v1/check?deny_status=403 HTTP/1.1\r\nHost: h\r\n"
		 "x-user-id: abs\r\n\r\n");
	CHECK(sluice_conn_waiting(&c));
	CHECK(strcmp(sluice_conn_url(&c), "/v1/check?deny_status=403") == 0);
	CHECK_EQ_U64(deferred_run(&store), 1);
	feed(&c, "GET /v1/check HTTP/1.1\r\nHost: h\r\nx-user-id: abs\r\n\r\n");
	CHECK_EQ_U64(deferred_run(&store), 1);
	CHECK_EQ_U64(count_answers(&c, st, 4), 2);
	CHECK(memmem(c.out.data, c.out.len, "Remaining: 98", 13) != NULL);
	CHECK(sluice_conn_release(&c));
}

static void test_unsupported_version_is_505(void)
{
	static const char *const bad[] = {
		"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n",
		"GET /healthz HTTP/1.2\r\nHost: x\r\n\r\n",
		"GET /healthz HTTP/0.9\r\n\r\n",
		"GET /healthz HTTP/3.1\r\nHost: x\r\n\r\n",
		"GET /healthz\r\n\r\n",
	};
	EXPECT_EACH(bad, 505);
}

/* Shapes that let a proxy and us disagree on where a request ends. */
static void test_ambiguous_framing_is_400(void)
{
	static const char *const bad[] = {
		"POST /v1/take HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
		"Content-Length: 2\r\n\r\n{}",
		"POST /v1/take HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
		"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /v1/take HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
		"gzip\r\n"
		"\r\n{}",
		"POST /v1/take HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
		"chunked, gzip\r\n\r\n0\r\n\r\n",
		"GET /healthz HTTP/1.1\r\nHost: x\r\nx-a: v\rw\r\n\r\n",
	};
	static const char nul[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n"
				  "x-a: v\0w\r\n\r\n";
	int closed;

	EXPECT_EACH(bad, 400);
	CHECK_EQ_U64(status_of(nul, sizeof(nul) - 1, &closed), 400);
	CHECK(closed);
}

/* docs/HTTP.md: after a 400 the connection is closed, whoever found the
 * request bad (the parser or a handler). */
static void test_every_400_closes(void)
{
	static sluice_conn_t c;
	int st[4];

	conn_init(&c);
	feed(&c,
	     "POST /v1/take HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
	     "{bad}GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
	CHECK_EQ_U64(count_answers(&c, st, 4), 1);
	CHECK_EQ_U64(st[0], 400);
	CHECK(c.want_close);
	CHECK(memmem(c.out.data, c.out.len, "Connection: close", 17) != NULL);
	CHECK(sluice_conn_release(&c));

	conn_init(&c);
	feed(&c, "GET /v1/check?deny_status=500 HTTP/1.1\r\nHost: x\r\n\r\n");
	CHECK_EQ_U64(count_answers(&c, st, 4), 1);
	CHECK_EQ_U64(st[0], 400);
	CHECK(c.want_close);
	CHECK(sluice_conn_release(&c));
}

/* Only the request head decides: a trailer after a chunked body (here the
 * key header, and a second Host) is never read as a header.  Two requests
 * naming "trailer" in a trailer fall back to the peer's address and leave
 * the "trailer" bucket untouched. */
static void test_trailers_never_decide(void)
{
	static const char chunked[] =
		"POST /v1/check HTTP/1.1\r\nHost: x\r\n"
		"Transfer-Encoding: chunked\r\n\r\n"
		"2\r\nab\r\n0\r\nx-user-id: trailer\r\nHost: y\r\n\r\n";
	static sluice_conn_t c;
	int st[4], i;

	for (i = 0; i < 2; i++) {
		conn_init(&c);
		feed(&c, chunked);
		CHECK(sluice_conn_waiting(&c));
		CHECK(sluice_conn_header(&c, "x-user-id", NULL) == NULL);
		CHECK_EQ_U64(deferred_run(&store), 1);
		CHECK_EQ_U64(count_answers(&c, st, 4), 1);
		CHECK_EQ_U64(st[0], 200);
		CHECK(sluice_conn_release(&c));
	}
	conn_init(&c);
	feed(&c, "GET /v1/check HTTP/1.1\r\nHost: x\r\n"
		 "x-user-id: trailer\r\n\r\n");
	CHECK_EQ_U64(deferred_run(&store), 1);
	CHECK(memmem(c.out.data, c.out.len, "Remaining: 99", 13) != NULL);
	CHECK(sluice_conn_release(&c));
}

/* Trailers count against max_header_bytes like the head does. */
static void test_trailers_are_bounded(void)
{
	static char req[20000];
	int n;

	n = snprintf(req, sizeof(req),
		     "POST /v1/take HTTP/1.1\r\nHost: x\r\n"
		     "Transfer-Encoding: chunked\r\n\r\n0\r\nx-pad: ");
	memset(req + n, 'a', 9000);
	n += 9000;
	snprintf(req + n, sizeof(req) - (size_t)n, "\r\n\r\n");
	CHECK_EQ_U64(status_str(req, NULL), 431);
}

/* A field value is read whole, never cut to a buffer's size: a rate with
 * junk after 63 bytes, or after a NUL, is refused, not read as its start;
 * so is a rule name with a NUL. */
static void test_take_fields_are_never_cut(void)
{
	static const char *const bodies[] = {
		"{\"key\":\"k\",\"capacity\":5,\"rate\":\"2/s"
		"                                                            "
		"          junk\"}",
		"{\"key\":\"k\",\"capacity\":5,\"rate\":\"2/s\\u0000junk\"}",
		"{\"key\":\"k\",\"rule\":\"default\\u0000junk\"}",
	};
	char req[512];
	size_t i;

	for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		snprintf(req, sizeof(req),
			 "POST /v1/take HTTP/1.1\r\nHost: x\r\n"
			 "Content-Length: %zu\r\n\r\n%s",
			 strlen(bodies[i]), bodies[i]);
		CHECK_EQ_U64(status_str(req, NULL), 400);
	}
}

/* Chunked framing exactly as RFC 9112 section 7.1 writes it: CRLF after
 * each chunk's data, and nothing but an extension after the size. */
static void test_malformed_chunking_is_400(void)
{
#define TE                                                                     \
	"POST /v1/take HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "             \
	"chunked\r\n\r\n"
#define BODY "{\"key\":\"k\",\"capacity\":9,\"rate\":\"1/s\"}" /* 0x25 */
	static const char *const bad[] = {
		/* two bytes other than CRLF after the data */
		TE "25\r\n" BODY "XY0\r\n\r\n",
		TE "25\r\n" BODY "\n\n0\r\n\r\n",
		TE "25\r\n" BODY "\r\r0\r\n\r\n",
		/* whitespace after the size, without an extension */
		TE "25 \r\n" BODY "\r\n0\r\n\r\n",
		TE "25\t\r\n" BODY "\r\n0\r\n\r\n",
		TE "25\r\n" BODY "\r\n0 \r\n\r\n",
		/* junk after the size, an extension without a name */
		TE "25 x\r\n" BODY "\r\n0\r\n\r\n",
		TE "25;\r\n" BODY "\r\n0\r\n\r\n",
		TE "25;a=\"b\r\n" BODY "\r\n0\r\n\r\n",
	};
	static const char *const good[] = {
		TE "25\r\n" BODY "\r\n0\r\n\r\n",
		/* extensions, with the whitespace RFC 9112 allows */
		TE "1;a=b\r\n{\r\n24 ; c ; d = \"e;f\"\r\n"
		   "\"key\":\"k\",\"capacity\":9,\"rate\":\"1/s\"}"
		   "\r\n0;x\r\n\r\n",
		TE "25\r\n" BODY "\r\n0\r\nx-trailer: t\r\n\r\n",
	};
#undef TE
#undef BODY
	size_t i;

	EXPECT_EACH(bad, 400);
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK_EQ_U64(status_str(good[i], NULL), 200);
	/* pipelined: each chunked request ends where the next begins */
	{
		static sluice_conn_t c;
		char two[512];
		int st[4];

		snprintf(two, sizeof(two), "%s%s", good[2], good[0]);
		conn_init(&c);
		feed(&c, two);
		CHECK_EQ_U64(deferred_run(&store), 1);
		sluice_conn_resume(&c); /* what the transport does on wake */
		CHECK_EQ_U64(deferred_run(&store), 1);
		CHECK_EQ_U64(count_answers(&c, st, 4), 2);
		CHECK(st[0] == 200 && st[1] == 200);
		CHECK(sluice_conn_release(&c));
	}
	/* the same however the bytes arrive */
	for (i = 0; i < 2; i++) {
		static sluice_conn_t c;
		const char *req = i ? bad[0] : good[1];
		size_t k, n = strlen(req);
		int st[4];

		conn_init(&c);
		for (k = 0; k < n && !c.want_close; k++) {
			sluice_conn_feed(&c, req + k, 1);
			if (sluice_conn_waiting(&c))
				deferred_run(&store);
		}
		CHECK_EQ_U64(count_answers(&c, st, 4), 1);
		CHECK_EQ_U64(st[0], i ? 400 : 200);
		CHECK(sluice_conn_release(&c));
	}
}

/* A client that pipelines requests and never reads: parsing stops once
 * out_high bytes of answers are unsent, the rest waits in `in`, and all
 * are answered, in order, as the transport writes out. */
static void test_unsent_answers_stop_parsing(void)
{
	static const char req[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
	static sluice_conn_t c;
	static char many[65536];
	size_t n = sizeof(many) / (sizeof(req) - 1), i, answers = 0, rounds = 0;
	int st[256];

	for (i = 0; i < n; i++)
		memcpy(many + i * (sizeof(req) - 1), req, sizeof(req) - 1);
	conn_init(&c);
	c.out_high = 4096;
	sluice_conn_feed(&c, many, n * (sizeof(req) - 1));
	CHECK(c.out.len >= 4096 && c.out.len < 4096 + 512);
	CHECK(sluice_conn_backlogged(&c));
	/* More bytes while backlogged queue up behind, in order. */
	feed(&c, "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
	while (c.out.len) {
		int k = count_answers(&c, st, 256);

		CHECK(c.out.len < 4096 + 512);
		CHECK(k > 0 && k < 256);
		CHECK(st[0] == 200 && st[k - 1] == (c.in.len ? 200 : 404));
		answers += (size_t)k;
		c.out.len = 0; /* written */
		sluice_conn_resume(&c);
		rounds++;
	}
	CHECK_EQ_U64(answers, n + 1);
	CHECK(rounds > 10);
	CHECK(!sluice_conn_backlogged(&c) && !c.want_close);
	CHECK(sluice_conn_release(&c));
}

/* The largest http.max_header_bytes and max_body_bytes the config
 * accepts are the ones that apply (not http-parser's own limits). */
static void test_largest_limits_apply(void)
{
	static const char yaml[] = "http: {max_header_bytes: 65536, "
				   "max_body_bytes: 65536}\n";
	static const char json[] = "{\"key\":\"big\",\"capacity\":1,"
				   "\"rate\":\"1/s\"}";
	static sluice_conn_t c;
	static char req[70000 + 65536 + 256];
	sluice_live_t *old = svc.live;
	sluice_config_t *cfg;
	char err[256];
	int n, i, st[4];

	cfg = sluice_config_parse("t.yaml", yaml, sizeof(yaml) - 1, err,
				  sizeof(err));
	CHECK(cfg != NULL);
	svc.live = sluice_live_new(cfg);
	for (i = 0; i < 2; i++) {
		size_t fill = i == 0 ? 65000 : 65600;

		n = snprintf(req, sizeof(req),
			     "GET /healthz HTTP/1.1\r\nHost: x\r\nx-f: ");
		memset(req + n, 'a', fill);
		n += (int)fill;
		n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n\r\n");
		conn_init(&c);
		sluice_conn_feed(&c, req, (size_t)n);
		CHECK_EQ_U64(count_answers(&c, st, 4), 1);
		CHECK_EQ_U64(st[0], i == 0 ? 200 : 431);
		CHECK(sluice_conn_release(&c));
	}
	for (i = 0; i < 2; i++) {
		size_t len = i == 0 ? 65536 : 65537;

		n = snprintf(req, sizeof(req),
			     "POST /v1/take HTTP/1.1\r\nHost: x\r\n"
			     "Content-Length: %zu\r\n\r\n%s",
			     len, json);
		memset(req + n, ' ', len - (sizeof(json) - 1));
		n += (int)(len - (sizeof(json) - 1));
		conn_init(&c);
		sluice_conn_feed(&c, req, (size_t)n);
		if (sluice_conn_waiting(&c))
			deferred_run(&store);
		CHECK_EQ_U64(count_answers(&c, st, 4), 1);
		CHECK_EQ_U64(st[0], i == 0 ? 200 : 413);
		CHECK(sluice_conn_release(&c));
	}
	sluice_live_unref(svc.live);
	svc.live = old;
}

/* One rule, so that each decision is one store call for deferred_run(). */
static const char one_rule[] = "rules:\n"
			       "  - name: default\n"
			       "    key: [\"header:x-user-id\", ip]\n"
			       "    limits: [{capacity: 100, rate: 2/s}]\n";

int main(void)
{
	store.store = open_memstore(1000);
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
	RUN(test_http11_needs_exactly_one_host);
	RUN(test_space_before_colon_is_400);
	RUN(test_obs_fold_is_400_however_the_bytes_arrive);
	RUN(test_absolute_form_is_routed_by_its_path);
	RUN(test_unsupported_version_is_505);
	RUN(test_ambiguous_framing_is_400);
	RUN(test_every_400_closes);
	RUN(test_unsent_answers_stop_parsing);
	RUN(test_largest_limits_apply);
	RUN(test_trailers_never_decide);
	RUN(test_trailers_are_bounded);
	RUN(test_take_fields_are_never_cut);
	RUN(test_malformed_chunking_is_400);
	sluice_take_free(svc.spare);
	sluice_live_unref(svc.live);
	sluice_memstore_free(store.store);
	TESTS_DONE();
}
