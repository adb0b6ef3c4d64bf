/*
 * handlers.c -- routing, /v1/check, health and metrics endpoints.
 */
#include "serve/handlers.h"
#include "policy/ratelimit_headers.h"
#include "serve/metrics_redis.h"
#include "util/log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

sluice_take_t *sluice_take_get(sluice_svc_t *svc)
{
	sluice_take_t *t = svc->spare;

	if (t) {
		svc->spare = NULL;
		return t;
	}
	return sluice_take_new();
}

void sluice_take_put(sluice_svc_t *svc, sluice_take_t *t)
{
	if (!svc->spare)
		svc->spare = t;
	else
		sluice_take_free(t);
}

void sluice_policy_name(const sluice_match_t *m, char *buf, size_t len)
{
	size_t n = strlen(m->rule->name), t;

	if (n >= len)
		n = len - 1;
	memcpy(buf, m->rule->name, n);
	if (m->rule->ntiers > 0 && n + 1 < len) {
		buf[n++] = '/';
		t = strlen(m->set->name);
		if (t >= len - n)
			t = len - n - 1;
		memcpy(buf + n, m->set->name, t);
		n += t;
	}
	buf[n] = '\0';
}

void sluice_count_verdict(sluice_conn_t *c, const sluice_take_t *t)
{
	sluice_metrics_t *m = c->svc->metrics;
	size_t i;

	for (i = 0; i < t->nmatches; i++) {
		const sluice_match_result_t *r = &t->results[i];
		const sluice_rule_t *rule = t->matches[i].rule;
		size_t slot =
			rule == &t->scratch_rule
				? SLUICE_METRIC_ADHOC
				: c->req_live->slots[sluice_live_rule_index(
					  c->req_live, rule)];

		if (r->store_err)
			sluice_count(&m->store_errors[slot], 1);
		switch (r->outcome) {
		case SLUICE_OUT_ALLOWED:
			sluice_count(&m->decisions[slot][SLUICE_RESULT_ALLOWED],
				     1);
			break;
		case SLUICE_OUT_LIMITED:
			sluice_count(&m->decisions[slot][SLUICE_RESULT_LIMITED],
				     1);
			if (rule->shadow)
				sluice_count(&m->shadow_rejections[slot], 1);
			break;
		case SLUICE_OUT_ERROR_OPEN:
		case SLUICE_OUT_ERROR_CLOSED:
			sluice_count(&m->decisions[slot][SLUICE_RESULT_ERROR],
				     1);
			break;
		case SLUICE_OUT_SKIPPED:
			break;
		}
	}
}

void sluice_verdict_headers(sluice_conn_t *c, const sluice_take_t *t,
			    const sluice_verdict_t *v)
{
	const sluice_match_t *m;
	char name[256];

	if (v->report < 0)
		return;
	m = &t->matches[v->report];
	/* A shadow rule never limits: a client must not read "Remaining: 0"
	 * from it.  (The verdict reports one when only shadow rules
	 * matched, for simulate and replay.) */
	if (m->rule->shadow)
		return;
	sluice_policy_name(m, name, sizeof(name));
	sluice_ratelimit_headers_set(&c->out, name, m->set->limits,
				     m->set->nlimits, v->which, &v->summary,
				     !v->allowed);
}

void sluice_resp_store_error(sluice_conn_t *c)
{
	static const char body[] =
		"{\"error\":\"store_unavailable\",\"message\":\"the rate-limit "
		"store failed and the rule fails closed\"}";

	sluice_resp_begin(c, 503);
	sluice_buf_puts(&c->out, "Retry-After: 1\r\n");
	sluice_resp_end(c, "application/json", body, sizeof(body) - 1);
}

static void method_not_allowed(sluice_conn_t *c, const char *allow)
{
	static const char body[] =
		"{\"error\":\"method_not_allowed\",\"message\":\"see the Allow "
		"header\"}";

	sluice_resp_begin(c, 405);
	sluice_buf_puts(&c->out, "Allow: ");
	sluice_buf_puts(&c->out, allow);
	sluice_buf_append(&c->out, "\r\n", 2);
	sluice_resp_end(c, "application/json", body, sizeof(body) - 1);
}

static void json_status_len(sluice_conn_t *c, int status, const char *text,
			    size_t len)
{
	sluice_resp_begin(c, status);
	sluice_resp_end(c, "application/json", text, len);
}

static void json_status(sluice_conn_t *c, int status, const char *text)
{
	json_status_len(c, status, text, strlen(text));
}

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

static void check_done(void *arg, const sluice_verdict_t *v)
{
	sluice_conn_t *c = arg;
	sluice_take_t *t = c->take;
	sluice_svc_t *svc = c->svc;

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
		sluice_resp_begin(c, c->deny_status);
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
	const char *method, *uri, *v, *mh, *uh;
	size_t len, ulen, qlen;
	sluice_take_t *t;
	size_t i;

	c->deny_status = 429;
	v = query ? query_param(query, "deny_status", &qlen) : NULL;
	if (v) {
		if (qlen == 3 && memcmp(v, "403", 3) == 0) {
			c->deny_status = 403;
		} else if (!(qlen == 3 && memcmp(v, "429", 3) == 0)) {
			sluice_resp_error(c, 400, "bad_parameter",
					  "deny_status", "expected 403 or 429");
			return;
		}
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
		json_status(c, 500, "{\"error\":\"out_of_memory\"}");
		return;
	}
	if (sluice_take_match(t, cfg, &req) < 0) {
		sluice_take_put(c->svc, t);
		json_status(c, 500, "{\"error\":\"out_of_memory\"}");
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

	if (be->ops && be->ops->stats) {
		be->ops->stats(be->impl, &st);
		sluice_metrics_render(&body, &st);
	} else if (c->svc->store) {
		sluice_memstore_stats(c->svc->store, &st);
		sluice_metrics_render(&body, &st);
	} else {
		sluice_metrics_render(&body, NULL);
	}
	sluice_resp_begin(c, 200);
	sluice_resp_end(c, "text/plain; version=0.0.4; charset=utf-8",
			body.data, body.len);
	sluice_buf_free(&body);
}

/* 503 naming the Redis nodes that cannot be used and why, so that
 * "store_unavailable" comes with the reason (a refused password, a
 * certificate that does not verify) without reading the log. */
static void readyz_unavailable(sluice_conn_t *c)
{
	sluice_buf_t body = {0};

	sluice_buf_puts(&body, "{\"status\":\"store_unavailable\"");
	sluice_redis_metrics_unready(&body);
	sluice_buf_puts(&body, "}");
	if (body.oom)
		json_status(c, 503, "{\"status\":\"store_unavailable\"}");
	else
		json_status_len(c, 503, body.data, body.len);
	sluice_buf_free(&body);
}

static void handle_readyz(sluice_conn_t *c)
{
	if (c->svc->draining)
		json_status(c, 503, "{\"status\":\"draining\"}");
	else if (!sluice_backend_healthy(&c->svc->backend))
		readyz_unavailable(c);
	else
		json_status(c, 200, "{\"status\":\"ready\"}");
}

/* -------------------------------------------------------------- routing */

static int is_get(const sluice_conn_t *c)
{
	return c->method == HTTP_GET || c->method == HTTP_HEAD;
}

void sluice_handle(sluice_conn_t *c)
{
	char path[2048];
	const char *url = sluice_conn_url(c), *query = NULL, *q;
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

	/* admin.listen's socket serves the admin endpoints, and only it
	 * does when it is open. */
	if (c->admin_port || c->svc->admin_apart) {
		int admin_path = strcmp(path, "/v1/reset") == 0 ||
				 strcmp(path, "/v1/refund") == 0;

		if (c->admin_port && !admin_path) {
			sluice_resp_error(c, 404, "not_found", NULL,
					  "this is the admin listener: "
					  "/v1/reset, /v1/refund");
			return;
		}
		if (!c->admin_port && admin_path) {
			sluice_resp_error(c, 404, "not_found", NULL,
					  "the admin endpoints are served on "
					  "admin.listen only");
			return;
		}
	}

	if (strcmp(path, "/v1/check") == 0 ||
	    strncmp(path, "/v1/check/", 10) == 0) {
		handle_check(c, path, query);
	} else if (strcmp(path, "/v1/take") == 0) {
		if (c->method == HTTP_POST)
			sluice_api_take(c);
		else
			method_not_allowed(c, "POST");
	} else if (strcmp(path, "/v1/reset") == 0 ||
		   strcmp(path, "/v1/refund") == 0) {
		if (c->method == HTTP_POST || !c->req_live->cfg->admin_token)
			sluice_api_admin(c, strcmp(path, "/v1/refund") == 0);
		else
			method_not_allowed(c, "POST");
	} else if (strcmp(path, "/metrics") == 0) {
		if (is_get(c))
			handle_metrics(c);
		else
			method_not_allowed(c, "GET, HEAD");
	} else if (strcmp(path, "/healthz") == 0) {
		if (is_get(c))
			json_status(c, 200, "{\"status\":\"ok\"}");
		else
			method_not_allowed(c, "GET, HEAD");
	} else if (strcmp(path, "/readyz") == 0) {
		if (is_get(c))
			handle_readyz(c);
		else
			method_not_allowed(c, "GET, HEAD");
	} else if (strcmp(path, "/json") == 0) {
		if (c->method == HTTP_POST)
			sluice_rls_json(c);
		else
			method_not_allowed(c, "POST");
	} else if (strcmp(path, "/healthcheck") == 0) {
		if (is_get(c))
			sluice_rls_healthcheck(c);
		else
			method_not_allowed(c, "GET, HEAD");
	} else {
		sluice_resp_error(c, 404, "not_found", NULL,
				  "no such endpoint; see /v1/check, /v1/take, "
				  "/metrics, /healthz, /readyz");
	}
}
