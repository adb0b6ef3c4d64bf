/*
 * handlers.c -- /v1/check, health and metrics endpoints, and the route
 * table (at the end): an endpoint is one row and one function.
 */
#include "serve/handlers.h"
#include "policy/envoy/config.h"
#include "policy/envoy/metrics.h"
#include "policy/request.h"
#include "serve/answer.h"
#include "xds/xds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ /v1/check */

/* The request's header fields, for the rules (through the connection's
 * API: every line of X-Forwarded-For, and whether an identity header came
 * twice). */
static const char *conn_header(void *ctx, const char *name, size_t *len)
{
	return sluice_conn_header(ctx, name, len);
}

static const char *conn_header_line(void *ctx, const char *name, size_t index,
				    size_t *len)
{
	return sluice_conn_header_line(ctx, name, index, len);
}

/* The value of query parameter `name` (not decoded), or NULL. */
static const char *query_param(const char *query, const char *name, size_t *len)
{
	size_t n = strlen(name);
	const char *p = query;

	while (p && *p) {
		const char *end = strchr(p, '&');
		size_t plen = end ? (size_t)(end - p) : strlen(p);

		if (plen >= n && memcmp(p, name, n) == 0 &&
		    (plen == n || p[n] == '=')) {
			*len = plen > n ? plen - n - 1 : 0;
			return plen > n ? p + n + 1 : p + n;
		}
		p = end ? end + 1 : NULL;
	}
	return NULL;
}

/* The status of a limited answer, from ?deny_status=: 429 (absent or
 * "429") or 403; 0 for any other value. */
static int deny_status(const char *query)
{
	const char *v;
	size_t n;

	v = query ? query_param(query, "deny_status", &n) : NULL;
	if (!v || (n == 3 && memcmp(v, "429", 3) == 0))
		return 429;
	return n == 3 && memcmp(v, "403", 3) == 0 ? 403 : 0;
}

/* The query string of the request being answered (its URL stays in the
 * connection until the answer), or NULL. */
static const char *check_query(sluice_conn_t *c)
{
	const char *q = strchr(sluice_conn_url(c), '?');

	return q ? q + 1 : NULL;
}

/* The policy's answer in HTTP.  sluice_resp_end() may free c (its
 * transport is gone): nothing of c after it. */
static void check_done(void *arg, const sluice_answer_t *a)
{
	sluice_conn_t *c = arg;
	sluice_buf_t body = {0};

	switch (a->kind) {
	case SLUICE_ANSWER_STORE_ERROR:
		sluice_resp_store_error(c);
		break;
	case SLUICE_ANSWER_ALLOWED:
		sluice_resp_begin(c, 200);
		sluice_answer_headers(a, &c->out);
		sluice_resp_end(c, NULL, "", 0);
		break;
	case SLUICE_ANSWER_LIMITED:
		sluice_answer_limited_body(a, &body);
		sluice_resp_begin(c, deny_status(check_query(c)));
		sluice_answer_headers(a, &c->out);
		sluice_resp_end(c, "application/json", body.data, body.len);
		sluice_buf_free(&body);
		break;
	}
}

/* The check request's facts go to the policy engine, which says which
 * request `proxy:` describes, decides it and composes the answer. */
static void handle_check(sluice_conn_t *c, const char *path, const char *query)
{
	sluice_decide_error_t err;
	sluice_request_t req;
	int rc;

	if (!deny_status(query)) {
		sluice_resp_error(c, 400, "bad_parameter", "deny_status",
				  "expected 403 or 429");
		return;
	}
	/* Its own method, and (Envoy ext_authz with a path prefix) the
	 * rest of its path, else its path. */
	memset(&req, 0, sizeof(req));
	req.method = http_method_str(c->method);
	req.method_len = strlen(req.method);
	req.path = path[9] == '/' ? path + 9 : path;
	req.path_len = strlen(req.path);
	req.header = conn_header;
	req.header_line = conn_header_line;
	req.header_ctx = c;
	req.peer = (const struct sockaddr *)&c->peer;

	sluice_conn_wait(c);
	rc = sluice_decide_request(c->svc, c->req_live, &req, sluice_now_us(),
				   check_done, c, &err);
	if (rc == SLUICE_EINVAL)
		sluice_resp_error(c, 400, "bad_request", err.field,
				  err.message);
	else if (rc < 0)
		sluice_resp_json(c, 500, "{\"error\":\"out_of_memory\"}");
}

/* ------------------------------------------------------ health, metrics */

static void handle_metrics(sluice_conn_t *c)
{
	sluice_memstore_stats_t st;
	sluice_buf_t body = {0};
	sluice_backend_t *be = &c->svc->backend;
	const sluice_envoy_config_t *e = c->svc->live && c->svc->live->cfg
						 ? c->svc->live->cfg->envoy
						 : NULL;
	/* The Envoy counts' names: envoy.metrics (sluice's by default). */
	int style = e ? e->settings.metrics_style : SLUICE_ENVOY_METRICS_SLUICE;

	if (be->ops && be->ops->stats) {
		be->ops->stats(be->impl, &st);
		sluice_metrics_render(&body, &st, style);
	} else if (c->svc->stats_store) {
		sluice_memstore_stats(c->svc->stats_store, &st);
		sluice_metrics_render(&body, &st, style);
	} else {
		sluice_metrics_render(&body, NULL, style);
	}
	sluice_resp_begin(c, 200);
	sluice_resp_end(c, "text/plain; version=0.0.4; charset=utf-8",
			body.data, body.len);
	sluice_buf_free(&body);
}

/* 503 naming the store's nodes that cannot be used and why (Redis's:
 * store/store_redis_metrics.h), so that
 * "store_unavailable" comes with the reason (a refused password, a
 * certificate that does not verify) without reading the log. */
static void readyz_unavailable(sluice_conn_t *c)
{
	sluice_buf_t body = {0};

	sluice_buf_puts(&body, "{\"status\":\"store_unavailable\"");
	sluice_metrics_store_unready(&body);
	sluice_buf_puts(&body, "}");
	if (body.oom)
		sluice_resp_json(c, 503, "{\"status\":\"store_unavailable\"}");
	else
		sluice_resp_json_len(c, 503, body.data, body.len);
	sluice_buf_free(&body);
}

static void handle_readyz(sluice_conn_t *c)
{
	if (c->svc->draining)
		sluice_resp_json(c, 503, "{\"status\":\"draining\"}");
	else if (!sluice_backend_healthy(&c->svc->backend))
		readyz_unavailable(c);
	else if (sluice_xds_waiting()) /* no config from envoy.xds yet */
		sluice_resp_json(c, 503, "{\"status\":\"config_pending\"}");
	else
		sluice_resp_json(c, 200, "{\"status\":\"ready\"}");
}

/* -------------------------------------------------------------- routing */

/* Methods a route answers; any other gets 405 with the route's Allow. */
enum { ROUTE_ANY = 0, ROUTE_GET, ROUTE_POST };

typedef struct route_s {
	const char *path;
	unsigned subpaths : 1; /* also path + "/...", e.g. /v1/check/orig */
	unsigned admin : 1;    /* on admin.listen, and only there when open */
	int methods;
	void (*handle)(sluice_conn_t *c, const char *path, const char *query);
} route_t;

static void route_take(sluice_conn_t *c, const char *path, const char *query)
{
	(void)path;
	(void)query;
	sluice_api_take(c);
}

/* /v1/reset, /v1/refund, /v1/set: with the admin endpoints off, any method gets
 * admin.c's 404 (they are not there to be called at all). */
static void route_admin(sluice_conn_t *c, const char *path, const char *query)
{
	(void)query;
	if (c->method != HTTP_POST && c->req_live->cfg->admin_token) {
		sluice_resp_method_not_allowed(c, "POST");
		return;
	}
	sluice_api_admin(c,
			 strcmp(path, "/v1/refund") == 0 ? SLUICE_ADMIN_REFUND
			 : strcmp(path, "/v1/set") == 0	 ? SLUICE_ADMIN_SET
							 : SLUICE_ADMIN_RESET);
}

static void route_rlconfig(sluice_conn_t *c, const char *path,
			   const char *query)
{
	(void)path;
	(void)query;
	sluice_api_rlconfig(c);
}

static void route_metrics(sluice_conn_t *c, const char *path, const char *query)
{
	(void)path;
	(void)query;
	handle_metrics(c);
}

static void route_healthz(sluice_conn_t *c, const char *path, const char *query)
{
	(void)path;
	(void)query;
	sluice_resp_json(c, 200, "{\"status\":\"ok\"}");
}

static void route_readyz(sluice_conn_t *c, const char *path, const char *query)
{
	(void)path;
	(void)query;
	handle_readyz(c);
}

static void route_rls_json(sluice_conn_t *c, const char *path,
			   const char *query)
{
	(void)path;
	(void)query;
	sluice_rls_json(c);
}

static void route_healthcheck(sluice_conn_t *c, const char *path,
			      const char *query)
{
	(void)path;
	(void)query;
	sluice_rls_healthcheck(c);
}

/* Every endpoint: a new one is a row here and its function. */
static const route_t routes[] = {
	{"/v1/check", 1, 0, ROUTE_ANY, handle_check},
	{"/v1/take", 0, 0, ROUTE_POST, route_take},
	{"/v1/reset", 0, 1, ROUTE_ANY, route_admin},
	{"/v1/refund", 0, 1, ROUTE_ANY, route_admin},
	{"/v1/set", 0, 1, ROUTE_ANY, route_admin},
	{"/rlconfig", 0, 1, ROUTE_GET, route_rlconfig},
	{"/metrics", 0, 0, ROUTE_GET, route_metrics},
	{"/healthz", 0, 0, ROUTE_GET, route_healthz},
	{"/readyz", 0, 0, ROUTE_GET, route_readyz},
	/* Any method, as envoyproxy/ratelimit: the body decides (a GET
	 * without one is a 400). */
	{"/json", 0, 0, ROUTE_ANY, route_rls_json},
	{"/healthcheck", 0, 0, ROUTE_GET, route_healthcheck},
};

static const route_t *route_find(const char *path)
{
	size_t i, n;

	for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		n = strlen(routes[i].path);
		if (strncmp(path, routes[i].path, n) == 0 &&
		    (path[n] == '\0' || (routes[i].subpaths && path[n] == '/')))
			return &routes[i];
	}
	return NULL;
}

/* The endpoints a 404 points at, read from routes[] (the admin ones, or
 * the others), so that the list is never written by hand beside it. */
static void route_list(char *out, size_t len, int admin)
{
	size_t i, n = 0;
	int w;

	out[0] = '\0';
	for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		if (routes[i].admin != admin)
			continue;
		w = snprintf(out + n, len - n, "%s%s", n ? ", " : "",
			     routes[i].path);
		if (w < 0 || (size_t)w >= len - n)
			break;
		n += (size_t)w;
	}
}

static int method_ok(const sluice_conn_t *c, int methods)
{
	switch (methods) {
	case ROUTE_GET:
		return c->method == HTTP_GET || c->method == HTTP_HEAD;
	case ROUTE_POST:
		return c->method == HTTP_POST;
	default:
		return 1;
	}
}

void sluice_handle(sluice_conn_t *c)
{
	char path[2048], list[256], msg[320];
	const char *url = sluice_conn_url(c), *query = NULL, *q;
	const route_t *r;
	size_t plen;

	q = strchr(url, '?');
	plen = q ? (size_t)(q - url) : strlen(url);
	if (q)
		query = q + 1;
	if (plen >= sizeof(path)) {
		sluice_resp_error(c, 404, "not_found", NULL,
				  "no such endpoint");
		return;
	}
	memcpy(path, url, plen);
	path[plen] = '\0';
	r = route_find(path);

	/* admin.listen's socket serves the admin endpoints, and only it
	 * does when it is open. */
	if (c->admin_port && !(r && r->admin)) {
		route_list(list, sizeof(list), 1);
		snprintf(msg, sizeof(msg), "this is the admin listener: %s",
			 list);
		sluice_resp_error(c, 404, "not_found", NULL, msg);
		return;
	}
	if (!c->admin_port && c->admin_apart && r && r->admin) {
		sluice_resp_error(c, 404, "not_found", NULL,
				  "the admin endpoints are served on "
				  "admin.listen only");
		return;
	}
	if (!r) {
		route_list(list, sizeof(list), 0);
		snprintf(msg, sizeof(msg), "no such endpoint; see %s", list);
		sluice_resp_error(c, 404, "not_found", NULL, msg);
		return;
	}
	if (!method_ok(c, r->methods)) {
		sluice_resp_method_not_allowed(
			c, r->methods == ROUTE_POST ? "POST" : "GET, HEAD");
		return;
	}
	r->handle(c, path, query);
}
