/*
 * metrics.c -- the Prometheus text of every thread's counters
 * (policy/counters.c keeps their registry) and of the stores.
 */
#include "policy/envoy/metrics.h"
#include "serve/metrics.h"
#include "util/invariant.h"
#include "xds/xds.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Upper bounds of the latency histogram as printed
 * (sluice_latency_bucket_ns[] in policy/counters.c). */
static const char *const bucket_le[SLUICE_LATENCY_BUCKETS] = {
	"0.000025", "0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025",
	"0.005",    "0.01",    "0.025",	 "0.05",    "0.1",    "1"};

/* Status codes with their own series; everything else is counted as 0. */
static const int codes[16] = {200, 400, 403, 404, 405, 408,
			      413, 429, 431, 500, 503, 0};

/* Reloads by [trigger][ok]; the triggers' label values: */
static sluice_counter_t reloads[3][2];
static const char *const reload_triggers[3] = {"sighup", "config_dir", "xds"};
static const sluice_store_exposition_t *store_x;
/* The registry as sluice_metrics_visit() shows it: set and read only
 * under the registry's lock (render_counters). */
static const sluice_metrics_t *all;
static const char *const *slot_names;

void sluice_metrics_response(sluice_metrics_t *m, int status,
			     uint64_t elapsed_ns)
{
	size_t i;

	for (i = 0; codes[i] && codes[i] != status; i++)
		;
	sluice_count(&m->responses[i], 1);
	sluice_latency_count(m->latency, &m->latency_sum_ns, elapsed_ns);
}

void sluice_metrics_loop_lag(sluice_metrics_t *m, uint64_t lag_ns)
{
	sluice_latency_count(m->loop_lag, &m->loop_lag_sum_ns, lag_ns);
}

void sluice_metrics_set_store(const sluice_store_exposition_t *x)
{
	store_x = x;
}

void sluice_metrics_store_unready(sluice_buf_t *out)
{
	if (store_x && store_x->unready)
		store_x->unready(out);
}

void sluice_metrics_reload(int ok, int trigger)
{
	SLUICE_ASSERT(trigger == SLUICE_RELOAD_SIGHUP ||
		      trigger == SLUICE_RELOAD_CONFIG_DIR ||
		      trigger == SLUICE_RELOAD_XDS);
	atomic_fetch_add(&reloads[trigger][!!ok], 1);
}

/* ------------------------------------------------------------- rendering */

static uint64_t ld(const sluice_counter_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* Sums one counter over every thread, by its offset in the block. */
static uint64_t sum(size_t offset)
{
	const sluice_metrics_t *m;
	uint64_t total = 0;

	for (m = all; m; m = m->next)
		total += ld(
			(const sluice_counter_t *)((const char *)m + offset));
	return total;
}

#define SUM(field) sum(offsetof(sluice_metrics_t, field))

static void help(sluice_buf_t *out, const char *name, const char *type,
		 const char *text)
{
	sluice_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, text, name,
			  type);
}

static void series(sluice_buf_t *out, const char *name, const char *k1,
		   const char *v1, const char *k2, const char *v2, uint64_t v)
{
	sluice_buf_puts(out, name);
	if (k1) {
		sluice_buf_printf(out, "{%s=\"", k1);
		sluice_buf_label(out, v1);
		sluice_buf_append(out, "\"", 1);
		if (k2) {
			sluice_buf_printf(out, ",%s=\"", k2);
			sluice_buf_label(out, v2);
			sluice_buf_append(out, "\"", 1);
		}
		sluice_buf_append(out, "}", 1);
	}
	sluice_buf_append(out, " ", 1);
	sluice_buf_u64(out, v);
	sluice_buf_append(out, "\n", 1);
}

static void render_rules(sluice_buf_t *out, size_t n)
{
	static const char *const results[SLUICE_RESULTS] = {"allowed",
							    "limited", "error"};
	size_t s, r;

	help(out, "sluice_decisions_total", "counter",
	     "Rate-limit decisions by rule and result (error: the store "
	     "failed).");
	for (s = 0; s < n; s++)
		for (r = 0; r < SLUICE_RESULTS; r++)
			series(out, "sluice_decisions_total", "rule",
			       slot_names[s], "result", results[r],
			       SUM(decisions[s][r]));
	help(out, "sluice_shadow_rejections_total", "counter",
	     "Requests a shadow rule would have rejected.");
	for (s = 0; s < n; s++)
		series(out, "sluice_shadow_rejections_total", "rule",
		       slot_names[s], NULL, NULL, SUM(shadow_rejections[s]));
	help(out, "sluice_store_errors_total", "counter",
	     "Store failures, by rule (the rule's on_store_error applied).");
	for (s = 0; s < n; s++)
		series(out, "sluice_store_errors_total", "rule", slot_names[s],
		       NULL, NULL, SUM(store_errors[s]));
}

/* The methods' labels, and which are unary (a row with no `update`),
 * from policy/grpc_tables.h; then "other". */
#define METHOD_LABEL(id, path, label, handle, update) label,
static const char *const grpc_methods[SLUICE_GRPC_METHODS] = {
	SLUICE_GRPC_METHOD_ROWS(METHOD_LABEL) "other"};
#undef METHOD_LABEL
#define METHOD_UNARY(id, path, label, handle, update)                          \
	sizeof(#update) == sizeof("NULL"),
static const unsigned char grpc_unary[SLUICE_GRPC_METHODS] = {
	SLUICE_GRPC_METHOD_ROWS(METHOD_UNARY) 0};
#undef METHOD_UNARY

/* One latency histogram per gRPC method in name{label=method}, the
 * methods with no call left out; `unary`: only the unary ones
 * (ShouldRateLimit, Health/Check), labelled by the method's last part,
 * as envoyproxy/ratelimit's interceptor names them. */
static void histograms(sluice_buf_t *out, const char *name, const char *text,
		       const char *label, const char *const *methods, int unary)
{
	char bucket[96], lbl[64];
	size_t m, i;

	help(out, name, "histogram", text);
	for (m = 0; m < SLUICE_GRPC_METHODS; m++) {
		const char *mname = methods[m];
		uint64_t cum = 0, total = 0;

		if (unary && !grpc_unary[m])
			continue;
		if (unary && strchr(mname, '/'))
			mname = strchr(mname, '/') + 1;
		for (i = 0; i <= SLUICE_LATENCY_BUCKETS; i++)
			total += SUM(grpc_latency[m][i]);
		if (!total)
			continue;
		snprintf(bucket, sizeof(bucket), "%s_bucket", name);
		for (i = 0; i < SLUICE_LATENCY_BUCKETS; i++) {
			cum += SUM(grpc_latency[m][i]);
			series(out, bucket, label, mname, "le", bucket_le[i],
			       cum);
		}
		cum += SUM(grpc_latency[m][SLUICE_LATENCY_BUCKETS]);
		series(out, bucket, label, mname, "le", "+Inf", cum);
		snprintf(lbl, sizeof(lbl), "%s", mname);
		sluice_buf_printf(out, "%s_sum{%s=\"%s\"} %.9f\n", name, label,
				  lbl,
				  (double)SUM(grpc_latency_sum_ns[m]) / 1e9);
		sluice_buf_printf(out, "%s_count{%s=\"%s\"} ", name, label,
				  lbl);
		sluice_buf_u64(out, cum);
		sluice_buf_append(out, "\n", 1);
	}
}

/* envoyproxy/ratelimit's server and config counts in the names a
 * statsd_exporter gives them (its default mapping): calls and their time
 * by method, config loads (the first and every reload). */
static void render_ratelimit(sluice_buf_t *out)
{
	uint64_t ok = 1, failed = 0, v;
	size_t m, c, i;

	help(out, "ratelimit_service_total_requests", "counter",
	     "gRPC calls by method (envoyproxy/ratelimit's name).");
	for (m = 0; m < SLUICE_GRPC_METHODS; m++) {
		if (!grpc_unary[m])
			continue;
		for (v = 0, c = 0; c < 17; c++)
			v += SUM(grpc_calls[m][c]);
		if (v)
			series(out, "ratelimit_service_total_requests",
			       "grpc_method",
			       strchr(grpc_methods[m], '/')
				       ? strchr(grpc_methods[m], '/') + 1
				       : grpc_methods[m],
			       NULL, NULL, v);
	}
	histograms(out, "ratelimit_service_response_time_seconds",
		   "gRPC call time by method (envoyproxy/ratelimit's name).",
		   "grpc_method", grpc_methods, 1);
	for (i = 0; i < 2; i++) {
		ok += ld(&reloads[i][1]);
		failed += ld(&reloads[i][0]);
	}
	help(out, "ratelimit_service_config_load_success", "counter",
	     "Config loads (the first and each reload) that succeeded.");
	series(out, "ratelimit_service_config_load_success", NULL, NULL, NULL,
	       NULL, ok);
	help(out, "ratelimit_service_config_load_error", "counter",
	     "Config reloads refused.");
	series(out, "ratelimit_service_config_load_error", NULL, NULL, NULL,
	       NULL, failed);
}

#define REFUSAL_LABEL(id, label, text) label,
const char *const sluice_grpc_refusal_names[SLUICE_GRPC_REFUSALS] = {
	SLUICE_GRPC_REFUSAL_ROWS(REFUSAL_LABEL)};
#undef REFUSAL_LABEL

/* gRPC calls by method and status; a series appears once it counts. */
static void render_grpc(sluice_buf_t *out)
{
	const char *const *methods = grpc_methods;
	char code[8];
	int m, c;

	help(out, "sluice_grpc_calls_total", "counter",
	     "gRPC calls answered, by method and grpc-status.");
	for (m = 0; m < SLUICE_GRPC_METHODS; m++)
		for (c = 0; c < 17; c++) {
			uint64_t v = SUM(grpc_calls[m][c]);

			if (!v)
				continue;
			snprintf(code, sizeof(code), "%d", c);
			series(out, "sluice_grpc_calls_total", "method",
			       methods[m], "code", code, v);
		}
	histograms(out, "sluice_grpc_request_duration_seconds",
		   "Time from a gRPC call's request headers to its answer, by "
		   "method.",
		   "method", methods, 0);
	help(out, "sluice_grpc_connections", "gauge",
	     "Open gRPC (HTTP/2) client connections.");
	series(out, "sluice_grpc_connections", NULL, NULL, NULL, NULL,
	       SUM(grpc_connections));
	help(out, "sluice_grpc_connections_accepted_total", "counter",
	     "gRPC client connections accepted.");
	series(out, "sluice_grpc_connections_accepted_total", NULL, NULL, NULL,
	       NULL, SUM(grpc_accepted));
	help(out, "sluice_grpc_connections_refused_total", "counter",
	     "gRPC connections cut off, by reason.");
	for (m = 0; m < SLUICE_GRPC_REFUSALS; m++)
		series(out, "sluice_grpc_connections_refused_total", "reason",
		       sluice_grpc_refusal_names[m], NULL, NULL,
		       SUM(grpc_refused[m]));
	help(out, "sluice_grpc_requests_shed_total", "counter",
	     "gRPC requests shed while their message was still arriving, "
	     "to make room in a short request budget.");
	series(out, "sluice_grpc_requests_shed_total", NULL, NULL, NULL, NULL,
	       SUM(grpc_shed));
}

static void render_tls(sluice_buf_t *out)
{
	static const char *const listeners[SLUICE_TLS_LISTENERS] = {
		"http", "admin", "grpc"};
	int i;

	help(out, "sluice_tls_reload_failures_total", "counter",
	     "TLS certificate or key files that changed but could not be "
	     "used (the certificate in use was kept), by listener.");
	for (i = 0; i < SLUICE_TLS_LISTENERS; i++)
		series(out, "sluice_tls_reload_failures_total", "listener",
		       listeners[i], NULL, NULL, SUM(tls_reload_failures[i]));
}

static void render_http(sluice_buf_t *out)
{
	char code[8];
	uint64_t cum = 0;
	size_t i;

	help(out, "sluice_http_responses_total", "counter",
	     "HTTP responses by status code (0: any other).");
	for (i = 0; i == 0 || codes[i - 1]; i++) {
		snprintf(code, sizeof(code), "%d", codes[i]);
		series(out, "sluice_http_responses_total", "code", code, NULL,
		       NULL, SUM(responses[i]));
	}
	help(out, "sluice_request_duration_seconds", "histogram",
	     "Time from the first byte of a request to its answer.");
	for (i = 0; i < SLUICE_LATENCY_BUCKETS; i++) {
		cum += SUM(latency[i]);
		series(out, "sluice_request_duration_seconds_bucket", "le",
		       bucket_le[i], NULL, NULL, cum);
	}
	cum += SUM(latency[SLUICE_LATENCY_BUCKETS]);
	series(out, "sluice_request_duration_seconds_bucket", "le", "+Inf",
	       NULL, NULL, cum);
	sluice_buf_printf(out, "sluice_request_duration_seconds_sum %.9f\n",
			  (double)SUM(latency_sum_ns) / 1e9);
	series(out, "sluice_request_duration_seconds_count", NULL, NULL, NULL,
	       NULL, cum);
	/* The loop's own lag: a slow store's timeouts beside a large lag
	 * are a busy host (or a long loop turn), not the store. */
	help(out, "sluice_event_loop_lag_seconds", "histogram",
	     "How late the loop threads ran a timer due every 100 ms "
	     "(CPU starvation or long loop turns).");
	cum = 0;
	for (i = 0; i < SLUICE_LATENCY_BUCKETS; i++) {
		cum += SUM(loop_lag[i]);
		series(out, "sluice_event_loop_lag_seconds_bucket", "le",
		       bucket_le[i], NULL, NULL, cum);
	}
	cum += SUM(loop_lag[SLUICE_LATENCY_BUCKETS]);
	series(out, "sluice_event_loop_lag_seconds_bucket", "le", "+Inf", NULL,
	       NULL, cum);
	sluice_buf_printf(out, "sluice_event_loop_lag_seconds_sum %.9f\n",
			  (double)SUM(loop_lag_sum_ns) / 1e9);
	series(out, "sluice_event_loop_lag_seconds_count", NULL, NULL, NULL,
	       NULL, cum);
	help(out, "sluice_connections", "gauge", "Open client connections.");
	series(out, "sluice_connections", NULL, NULL, NULL, NULL,
	       SUM(connections));
	help(out, "sluice_connections_accepted_total", "counter",
	     "Client connections accepted.");
	series(out, "sluice_connections_accepted_total", NULL, NULL, NULL, NULL,
	       SUM(accepted));
	help(out, "sluice_connection_timeouts_total", "counter",
	     "Connections closed for idleness or slowness.");
	series(out, "sluice_connection_timeouts_total", NULL, NULL, NULL, NULL,
	       SUM(timeouts));
	render_grpc(out);
}

static void render_store(sluice_buf_t *out, const sluice_memstore_stats_t *st)
{
	help(out, "sluice_memstore_keys", "gauge",
	     "Buckets (key + limit) resident in the memory store.");
	series(out, "sluice_memstore_keys", NULL, NULL, NULL, NULL, st->keys);
	help(out, "sluice_memstore_max_keys", "gauge",
	     "The memory store's bound on keys (store.max_keys).");
	series(out, "sluice_memstore_max_keys", NULL, NULL, NULL, NULL,
	       st->max_keys);
	help(out, "sluice_memstore_expired_total", "counter",
	     "States reclaimed because their bucket was full again.");
	series(out, "sluice_memstore_expired_total", NULL, NULL, NULL, NULL,
	       st->expired);
	help(out, "sluice_memstore_evictions_total", "counter",
	     "Buckets evicted to make room (lossy: the bucket was not full).");
	series(out, "sluice_memstore_evictions_total", "kind", "full", NULL,
	       NULL, st->evicted_full);
	series(out, "sluice_memstore_evictions_total", "kind", "lossy", NULL,
	       NULL, st->evicted_lossy);
	help(out, "sluice_memstore_evicted_debt_seconds_total", "counter",
	     "What lossy evictions forgave: the sum of their buckets' times "
	     "to full.");
	series(out, "sluice_memstore_evicted_debt_seconds_total", NULL, NULL,
	       NULL, NULL, st->evicted_debt_us / 1000000);
	help(out, "sluice_memstore_recovered_total", "counter",
	     "Shared store: shards repaired after a process died holding "
	     "their lock.");
	series(out, "sluice_memstore_recovered_total", NULL, NULL, NULL, NULL,
	       st->recovered);
}

/* What one scrape renders. */
typedef struct render_s {
	sluice_buf_t *out;
	int envoy_style; /* SLUICE_ENVOY_METRICS_* */
} render_t;

static void render_counters(void *arg, const sluice_metrics_t *blocks,
			    const char *const *names, size_t n)
{
	render_t *r = arg;

	all = blocks;
	slot_names = names;
	render_rules(r->out, n);
	render_http(r->out);
	render_tls(r->out);
	if (r->envoy_style & SLUICE_ENVOY_METRICS_RATELIMIT)
		render_ratelimit(r->out);
	all = NULL;
	slot_names = NULL;
}

void sluice_metrics_render(sluice_buf_t *out,
			   const sluice_memstore_stats_t *stats,
			   int envoy_style)
{
	render_t r = {.out = out, .envoy_style = envoy_style};
	size_t i;

	sluice_metrics_visit(render_counters, &r);
	if (stats)
		render_store(out, stats);
	if (store_x && store_x->render)
		store_x->render(out);
	sluice_envoy_metrics_render(out, envoy_style);
	sluice_xds_metrics_render(out);
	help(out, "sluice_build_info", "gauge",
	     "Always 1; the version of this binary as a label.");
	series(out, "sluice_build_info", "version", SLUICE_VERSION, NULL, NULL,
	       1);
	help(out, "sluice_config_reloads_total", "counter",
	     "Config reloads by result and by what started them (sighup, "
	     "config_dir: a change in envoy.config_dir, or xds: a control "
	     "plane's update).");
	for (i = 0; i < 3; i++) {
		series(out, "sluice_config_reloads_total", "result", "ok",
		       "trigger", reload_triggers[i], ld(&reloads[i][1]));
		series(out, "sluice_config_reloads_total", "result", "error",
		       "trigger", reload_triggers[i], ld(&reloads[i][0]));
	}
}
