/*
 * handlers.c -- /v1/check, health and metrics endpoints, and the route
 * table (at the end): an endpoint is one row and one function.
 */
#include "serve/handlers.h"
#include "policy/envoy_config.h"
#include "policy/envoy_metrics.h"
#include "policy/ratelimit_headers.h"
#include "serve/answer.h"
#include "util/log.h"
#include "xds/xds.h"

#include <assert.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ /v1/check */

static const char *conn_header(void *ctx, const char *name, size_t *len)
{
	return sluice_conn_header(ctx, name, len);
}

/* The index-th line of header `name`: the rules need every line of
 * X-Forwarded-For, and to know when an identity header came twice. */
static const char *conn_header_line(void *ctx, const char *name, size_t index,
				    size_t *len)
{
	const sluice_conn_t *c = ctx;
	size_t i, n = strlen(name);

	for (i = 0; i < c->nhdrs; i++) {
		const sluice_hdr_t *h = &c->hdrs[i];

		if (h->name_len == n &&
		    memcmp(c->head.data + h->name_off, name, n) == 0 &&
		    index-- == 0) {
			*len = h->value_len;
			return c->head.data + h->value_off;
		}
	}
	return NULL;
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

/*
 * The value of header `name` (NULL name or no such header: *out NULL).
 * Sent on two lines it is refused with 400: which line the proxy wrote
 * depends on the proxy (one that appends instead of replacing leaves the
 * client's first), and a guess would let the client pick the path.
 */
static int origin_header(sluice_conn_t *c, const char *name, const char **out,
			 size_t *len)
{
	size_t len2;

	*out = NULL;
	*len = 0;
	if (!name)
		return 0;
	if (conn_header_line(c, name, 1, &len2)) {
		sluice_resp_error(c, 400, "bad_request", name,
				  "sent on more than one line: the proxy "
				  "must set it, replacing the client's");
		return -1;
	}
	*out = conn_header_line(c, name, 0, len);
	if (*out && *len == 0)
		*out = NULL;
	return 0;
}

/* The configured URI header is missing but another proxy kind's is there:
 * most likely `proxy:` does not name the proxy in front (or a client
 * sent it).  It is not used; say so once, for the operator. */
static void warn_other_proxy(const sluice_conn_t *c, const char *uh)
{
	static const char *const known[] = {"x-original-uri",
					    "x-forwarded-uri"};
	static atomic_int warned;
	size_t i, len;

	for (i = 0; i < 2; i++)
		if (strcmp(known[i], uh) != 0 &&
		    sluice_conn_header(c, known[i], &len) &&
		    !atomic_exchange(&warned, 1))
			sluice_log_warn(
				"/v1/check: a request has %s but no %s, which "
				"`proxy:` names; %s is not used (set proxy: "
				"forward_auth behind Traefik or Caddy "
				"forward_auth, nginx behind nginx "
				"auth_request)",
				known[i], uh, known[i]);
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

static void check_done(void *arg, const sluice_verdict_t *v)
{
	sluice_conn_t *c = arg;
	sluice_take_t *t = c->take;
	sluice_svc_t *svc = c->svc;

	assert(t && t->finished && v == &t->verdict);

	/* sluice_resp_end() may free c (its transport is gone): detach the
	 * take first and touch nothing of c afterwards. */
	c->take = NULL;
	sluice_count_verdict(c, t);
	if (v->status) {
		sluice_resp_store_error(c);
	} else if (v->allowed) {
		sluice_resp_begin(c, 200);
		sluice_verdict_headers(c, t, v);
		sluice_resp_end(c, NULL, "", 0);
	} else {
		const sluice_match_t *m = &t->matches[v->report];
		sluice_buf_t body = {0};
		char name[256];

		sluice_policy_name(m, name, sizeof(name));
		sluice_limited_body(&body, name,
				    sluice_retry_us(&m->set->limits[v->which],
						    &v->summary));
		sluice_resp_begin(c, deny_status(check_query(c)));
		sluice_verdict_headers(c, t, v);
		sluice_resp_end(c, "application/json", body.data, body.len);
		sluice_buf_free(&body);
	}
	sluice_take_put(svc, t);
}

static void handle_check(sluice_conn_t *c, const char *path, const char *query)
{
	const sluice_config_t *cfg = c->req_live->cfg;
	sluice_request_t req;
	const char *method, *uri, *mh, *uh;
	size_t len, ulen;
	sluice_take_t *t;
	size_t i;

	if (!deny_status(query)) {
		sluice_resp_error(c, 400, "bad_parameter", "deny_status",
				  "expected 403 or 429");
		return;
	}

	/* The original request: from the headers `proxy:` names (and only
	 * those: another proxy's headers may be the client's own), else
	 * (Envoy ext_authz with a path prefix) the rest of our path, else
	 * this request itself. */
	sluice_config_proxy_headers(cfg, &mh, &uh);
	if (origin_header(c, mh, &method, &len) < 0 ||
	    origin_header(c, uh, &uri, &ulen) < 0)
		return;
	if (!method) {
		method = http_method_str(c->method);
		len = strlen(method);
	}
	req.method = method;
	req.method_len = len;
	len = ulen;
	if (!uri) {
		if (uh)
			warn_other_proxy(c, uh);
		uri = path[9] == '/' ? path + 9 : path;
		len = strlen(uri);
	}
	req.path = uri;
	req.path_len = len;
	for (i = 0; i < len; i++)
		if (uri[i] == '?' || uri[i] == '#')
			req.path_len = i, i = len;
	req.header = conn_header;
	req.header_line = conn_header_line;
	req.header_ctx = c;
	req.peer = (const struct sockaddr *)&c->peer;

	t = sluice_take_get(c->svc);
	if (!t) {
		sluice_resp_json(c, 500, "{\"error\":\"out_of_memory\"}");
		return;
	}
	if (sluice_take_match(t, cfg, &req) < 0) {
		sluice_take_put(c->svc, t);
		sluice_resp_json(c, 500, "{\"error\":\"out_of_memory\"}");
		return;
	}
	if (t->nmatches == 0) {
		/* No rule applies: nothing to limit. */
		sluice_take_put(c->svc, t);
		sluice_resp_begin(c, 200);
		sluice_resp_end(c, NULL, "", 0);
		return;
	}
	c->take = t;
	sluice_conn_wait(c);
	sluice_verdict_decide(&c->svc->backend, t, sluice_now_us(), check_done,
			      c);
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
	} else if (c->svc->store) {
		sluice_memstore_stats(c->svc->store, &st);
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
