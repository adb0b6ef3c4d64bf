/*
 * test_routes.c -- the route table of `sluice serve` (serve/handlers.c):
 * every endpoint reached by its path with its methods, 405 with the
 * route's Allow otherwise, the admin listener's split, /v1/check's
 * deny_status kept across an asynchronous decision, and the store's part
 * of /metrics and /readyz coming through the store exposition hook.
 */
#include "check.h"
#include "fake_store.h"
#include "serve/handlers.h"
#include "serve/metrics.h"
#include "stores.h"

#include <arpa/inet.h>
#include <string.h>

static deferred_t store;
static sluice_svc_t svc;

static void on_wake(sluice_conn_t *c)
{
	(void)c;
}

static void on_release(sluice_conn_t *c)
{
	free(c);
}

static const sluice_conn_io_t io = {.wake = on_wake, .release = on_release};

/* admin.listen is open: connections on the main port refuse the admin
 * endpoints (set by the server on every connection it accepts). */
static int admin_apart;

static sluice_conn_t *conn_new(int admin_port)
{
	sluice_conn_t *c = calloc(1, sizeof(*c));
	struct sockaddr_in peer;

	CHECK(c != NULL);
	memset(&peer, 0, sizeof(peer));
	peer.sin_family = AF_INET;
	peer.sin_addr.s_addr = htonl(0xc0000201); /* 192.0.2.1 */
	sluice_conn_init(c, &svc, &io, (const struct sockaddr *)&peer);
	c->admin_port = admin_port ? 1 : 0;
	c->admin_apart = admin_apart ? 1 : 0;
	return c;
}

/* The last answer's bytes. */
static char last[16384];
static size_t last_len;

/* Sends one request on a new connection (a 400 closes it), answers what
 * the store was asked, and returns the answer's status. */
static int ask_on(int admin_port, const char *method, const char *target)
{
	sluice_conn_t *c = conn_new(admin_port);
	char req[512];

	snprintf(req, sizeof(req),
		 "%s %s HTTP/1.1\r\nHost: x\r\nx-user-id: r\r\n"
		 "Content-Length: 0\r\n\r\n",
		 method, target);
	sluice_conn_feed(c, req, strlen(req));
	while (deferred_run(&store))
		;
	last_len = c->out.len < sizeof(last) ? c->out.len : sizeof(last);
	memcpy(last, c->out.data, last_len);
	if (sluice_conn_release(c))
		free(c);
	CHECK(last_len > 12);
	return atoi(last + 9);
}

static int ask(const char *method, const char *target)
{
	return ask_on(0, method, target);
}

static int has(const char *s)
{
	return memmem(last, last_len, s, strlen(s)) != NULL;
}

/* Each row's methods: the others get 405 naming what it takes. */
static void test_every_route_takes_its_methods(void)
{
	static const struct {
		const char *path;
		const char *good, *bad, *allow;
		int status;
	} rows[] = {
		{"/healthz", "GET", "POST", "Allow: GET, HEAD", 200},
		{"/healthz", "HEAD", "DELETE", "Allow: GET, HEAD", 200},
		{"/readyz", "GET", "PUT", "Allow: GET, HEAD", 200},
		{"/metrics", "GET", "POST", "Allow: GET, HEAD", 200},
		{"/healthcheck", "GET", "POST", "Allow: GET, HEAD", 200},
		{"/v1/take", "POST", "GET", "Allow: POST", 400},
	};
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		CHECK_EQ_U64(ask(rows[i].good, rows[i].path), rows[i].status);
		CHECK_EQ_U64(ask(rows[i].bad, rows[i].path), 405);
		CHECK(has(rows[i].allow));
	}
	/* /json reads any method's body, as envoyproxy/ratelimit: a GET
	 * without one is a 400, not a 405. */
	CHECK_EQ_U64(ask("GET", "/json"), 400);
	CHECK(!has("Allow:"));
	/* /v1/check takes any method, and paths below it. */
	CHECK_EQ_U64(ask("DELETE", "/v1/check"), 200);
	CHECK_EQ_U64(ask("GET", "/v1/check/some/original"), 200);
	CHECK_EQ_U64(ask("GET", "/v1/checkx"), 404);
	CHECK_EQ_U64(ask("GET", "/healthz/x"), 404);
	CHECK_EQ_U64(ask("GET", "/nowhere"), 404);
	CHECK(has("no such endpoint"));
	/* The 404 names every endpoint of the route table but the admin
	 * ones (the list is read from the table: /json and /healthcheck,
	 * once missing from a list written by hand, are there). */
	CHECK(has("/v1/check, /v1/take, /metrics, /healthz, /readyz, "
		  "/json, /healthcheck\""));
	CHECK(!has("/v1/reset"));
	/* Admin endpoints with a token: POST only. */
	CHECK_EQ_U64(ask("GET", "/v1/reset"), 405);
	CHECK(has("Allow: POST"));
	CHECK_EQ_U64(ask("POST", "/v1/refund"), 401);
}

/* admin.listen: only the admin endpoints there, and only there. */
static void test_admin_listener_split(void)
{
	CHECK_EQ_U64(ask_on(1, "GET", "/healthz"), 404);
	CHECK(has("this is the admin listener: /v1/reset, /v1/refund, "
		  "/v1/set, /rlconfig\""));
	CHECK_EQ_U64(ask_on(1, "POST", "/v1/set"), 401);
	CHECK_EQ_U64(ask_on(1, "POST", "/v1/reset"), 401);
	admin_apart = 1;
	CHECK_EQ_U64(ask_on(0, "POST", "/v1/reset"), 404);
	CHECK(has("served on admin.listen only"));
	CHECK_EQ_U64(ask_on(0, "GET", "/healthz"), 200);
	admin_apart = 0;
}

/* The status of a limited answer is read when the decision comes back,
 * after the store answered later. */
static void test_deny_status_survives_an_async_decision(void)
{
	int i, st = 0;

	CHECK_EQ_U64(ask("GET", "/v1/check?deny_status=500"), 400);
	CHECK(has("deny_status"));
	for (i = 0; i < 10 && st != 403; i++)
		st = ask("GET", "/v1/check?x=1&deny_status=403");
	CHECK_EQ_U64(st, 403);
	CHECK_EQ_U64(ask("GET", "/v1/check?deny_status=429"), 429);
	CHECK_EQ_U64(ask("GET", "/v1/check"), 429);
}

static void fake_render(sluice_buf_t *out)
{
	sluice_buf_puts(out, "fake_store_series 7\n");
}

static void fake_unready(sluice_buf_t *out)
{
	sluice_buf_puts(out, ",\"nodes\":[\"fake\"]");
}

static int unhealthy(void *impl)
{
	(void)impl;
	return 0;
}

/* What the store adds to /metrics and /readyz comes through the hook. */
static void test_store_exposition_hook(void)
{
	static const sluice_store_exposition_t x = {fake_render, fake_unready};
	sluice_store_ops_t ops = deferred_ops;

	CHECK_EQ_U64(ask("GET", "/metrics"), 200);
	CHECK(!has("fake_store_series"));
	sluice_metrics_set_store(&x);
	CHECK_EQ_U64(ask("GET", "/metrics"), 200);
	CHECK(has("fake_store_series 7\n"));
	ops.healthy = unhealthy;
	svc.backend.ops = &ops;
	CHECK_EQ_U64(ask("GET", "/readyz"), 503);
	CHECK(has("{\"status\":\"store_unavailable\",\"nodes\":[\"fake\"]}"));
	svc.backend.ops = &deferred_ops;
	sluice_metrics_set_store(NULL);
	CHECK_EQ_U64(ask("GET", "/readyz"), 200);
}

static const char config[] =
	"admin: {token: \"0123456789abcdef0123456789abcdef\"}\n"
	"rules:\n"
	"  - name: default\n"
	"    key: [\"header:x-user-id\"]\n"
	"    limits: [{capacity: 3, rate: 1/h}]\n";

int main(void)
{
	char err[256];

	store.store = open_memstore(1000);
	svc.live = sluice_live_new(sluice_config_parse(
		"t.yaml", config, sizeof(config) - 1, err, sizeof(err)));
	CHECK(svc.live != NULL);
	svc.metrics = sluice_metrics_new();
	svc.backend.ops = &deferred_ops;
	svc.backend.impl = &store;
	svc.backend.local = store.store;
	RUN(test_every_route_takes_its_methods);
	RUN(test_admin_listener_split);
	RUN(test_deny_status_survives_an_async_decision);
	RUN(test_store_exposition_hook);
	sluice_take_free(svc.spare);
	sluice_live_unref(svc.live);
	sluice_memstore_free(store.store);
	TESTS_DONE();
}
