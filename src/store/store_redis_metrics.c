/*
 * store_redis_metrics.c -- per Redis node gauges, call latency and
 * errors.
 */
#include "store/store_redis_metrics.h"
#include "util/counter.h"
#include "util/registry.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NODES	  64  /* distinct nodes; more share the last */
#define CLIENT_IX 256 /* a client's node numbers mapped; more: the last */
#define BUCKETS	  11

/* Call latency bounds, in nanoseconds and as printed. */
static const uint64_t bucket_ns[BUCKETS] = {
	100000,	  250000,   500000,   1000000,	 2500000,   5000000,
	10000000, 25000000, 50000000, 100000000, 1000000000};
static const char *const bucket_le[BUCKETS] = {
	"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
	"0.01",	  "0.025",   "0.05",   "0.1",	"1"};
static const char *const error_kind[SLUICE_REDIS_ERRORS] = {
	[SLUICE_REDIS_ERR_TIMEOUT] = "timeout",
	[SLUICE_REDIS_ERR_CONNECTION] = "connection",
	[SLUICE_REDIS_ERR_AUTH] = "auth",
	[SLUICE_REDIS_ERR_PROTOCOL] = "protocol",
	[SLUICE_REDIS_ERR_REDIRECT] = "moved_ask",
	[SLUICE_REDIS_ERR_TLS] = "tls",
	[SLUICE_REDIS_ERR_NO_MASTER] = "no_master",
	[SLUICE_REDIS_ERR_REFUSED] = "refused",
	[SLUICE_REDIS_ERR_NOPERM] = "noperm",
	[SLUICE_REDIS_ERR_OOM] = "oom",
	[SLUICE_REDIS_ERR_SATURATED] = "saturated",
};

/* A kind added to the library must be named above (a NULL is skipped
 * when rendering, but its count would be lost). */
_Static_assert(SLUICE_REDIS_ERRORS == SLUICE_REDIS_ERR_SATURATED + 1,
	       "name every sluice_redis_error_t in error_kind[]");

struct sluice_redis_metrics_s {
	/* Gauges as this client sees each node; `known` once reported. */
	sluice_counter_t known[NODES], up[NODES], breaker[NODES], conns[NODES];
	/* eviction_unsafe as an order of worse: 1 safe, 2 not known, 3 may
	 * evict buckets (0: not reported yet) */
	sluice_counter_t evict[NODES];
	/* the kind of the last failure (sluice_redis_error_t), for /readyz */
	sluice_counter_t last_kind[NODES];
	sluice_counter_t latency[NODES][BUCKETS + 1];
	sluice_counter_t latency_sum_ns[NODES];
	sluice_counter_t errors[NODES][SLUICE_REDIS_ERRORS];
	int16_t slot_of[CLIENT_IX]; /* client's node index -> slot (+1) */
	sluice_redis_metrics_t *next;
};

static char *names[NODES];
static sluice_registry_t reg =
	SLUICE_REGISTRY_INIT(sluice_redis_metrics_t, next, names);
/* Each node's last error in words, as a client last reported it (for
 * /readyz; free text never goes into a metric label). */
static char last_error[NODES][160];

sluice_redis_metrics_t *sluice_redis_metrics_new(void)
{
	return sluice_registry_new(&reg, sizeof(sluice_redis_metrics_t));
}

/* The process-wide number of a node name (registered on first use). */
static size_t node_slot(const char *name)
{
	return sluice_registry_slot(&reg, name);
}

static uint64_t ld(const sluice_counter_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

static void set(sluice_counter_t *c, uint64_t v)
{
	atomic_store_explicit(c, v, memory_order_relaxed);
}

void sluice_redis_metrics_report(void *arg,
				 const sluice_redis_node_report_t *rep)
{
	sluice_redis_metrics_t *m = arg;
	size_t ix = rep->index < CLIENT_IX ? rep->index : CLIENT_IX - 1, s;

	if (!m)
		return;
	if (!m->slot_of[ix])
		m->slot_of[ix] = (int16_t)(node_slot(rep->node) + 1);
	s = (size_t)m->slot_of[ix] - 1;
	set(&m->up[s], rep->up != 0);
	set(&m->breaker[s], rep->breaker_open != 0);
	set(&m->conns[s], rep->connections);
	set(&m->evict[s], rep->eviction_unsafe > 0   ? 3
			  : rep->eviction_unsafe < 0 ? 2
						     : 1);
	set(&m->known[s], 1);
	/* Gauge reports come every 500 ms per node, errors outside calls
	 * at the pace of reconnects, refused calls at the breaker's (five
	 * per 100 ms): the lock is taken there, never on the path of a call
	 * that succeeds or times out. */
	if ((rep->what != SLUICE_REDIS_REPORT_CALL ||
	     rep->error == SLUICE_REDIS_ERR_REFUSED ||
	     rep->error == SLUICE_REDIS_ERR_NOPERM ||
	     rep->error == SLUICE_REDIS_ERR_OOM) &&
	    rep->last_error && rep->last_error[0]) {
		pthread_mutex_lock(&reg.lock);
		snprintf(last_error[s], sizeof(last_error[s]), "%s",
			 rep->last_error);
		pthread_mutex_unlock(&reg.lock);
	}
	if (rep->error > SLUICE_REDIS_ERR_NONE &&
	    rep->error < SLUICE_REDIS_ERRORS)
		sluice_count(&m->errors[s][rep->error], 1);
	if (rep->error > SLUICE_REDIS_ERR_NONE &&
	    rep->error < SLUICE_REDIS_ERRORS &&
	    rep->error != SLUICE_REDIS_ERR_REDIRECT)
		set(&m->last_kind[s], (uint64_t)rep->error);
	if (rep->what != SLUICE_REDIS_REPORT_CALL)
		return;
	sluice_histogram_count(bucket_ns, BUCKETS, m->latency[s],
			       &m->latency_sum_ns[s], rep->latency_ns);
}

void sluice_redis_metrics_retire(sluice_redis_metrics_t *m)
{
	size_t s;

	if (!m)
		return;
	for (s = 0; s < NODES; s++)
		set(&m->known[s], 0);
}

/* ------------------------------------------------------------- render */

static void head(sluice_buf_t *out, const char *name, const char *type,
		 const char *text)
{
	sluice_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, text, name,
			  type);
}

/* name{node="...",k="v"} value; node names are host:port or a path,
 * escaped as Prometheus wants all the same. */
static void line(sluice_buf_t *out, const char *name, const char *node,
		 const char *k, const char *v, uint64_t value)
{
	sluice_buf_printf(out, "%s{node=\"", name);
	sluice_buf_label(out, node);
	sluice_buf_append(out, "\"", 1);
	if (k)
		sluice_buf_printf(out, ",%s=\"%s\"", k, v);
	sluice_buf_append(out, "} ", 2);
	sluice_buf_u64(out, value);
	sluice_buf_append(out, "\n", 1);
}

/* The sum of one counter over every block (gauges: over the blocks whose
 * client knows node s). */
static uint64_t total(size_t offset, int gauge, size_t s)
{
	const sluice_redis_metrics_t *m;
	uint64_t t = 0;

	for (m = reg.blocks; m; m = m->next)
		if (!gauge || ld(&m->known[s]))
			t += ld((const sluice_counter_t *)((const char *)m +
							   offset));
	return t;
}

#define SUM(field, gauge)                                                      \
	total(offsetof(sluice_redis_metrics_t, field), gauge, s)

/* The gauges of nodes 0..n (the registry's lock held). */
static void render_gauges(sluice_buf_t *out, size_t n)
{
	size_t s;

	head(out, "sluice_redis_up", "gauge",
	     "1 when every loop thread's client can use the node (handshake "
	     "done, pings answered, breaker not open).");
	for (s = 0; s < n; s++) {
		uint64_t known = SUM(known[s], 0), up = SUM(up[s], 1);

		line(out, "sluice_redis_up", names[s], NULL, NULL,
		     known && up == known);
	}
	head(out, "sluice_redis_breaker_open", "gauge",
	     "Loop threads whose circuit breaker for the node is open.");
	for (s = 0; s < n; s++)
		line(out, "sluice_redis_breaker_open", names[s], NULL, NULL,
		     SUM(breaker[s], 1));
	head(out, "sluice_redis_connections", "gauge",
	     "Connections to the node with their handshake done.");
	for (s = 0; s < n; s++)
		line(out, "sluice_redis_connections", names[s], NULL, NULL,
		     SUM(conns[s], 1));
	head(out, "sluice_redis_eviction_policy_unsafe", "gauge",
	     "1 when the node has maxmemory set with a policy other than "
	     "noeviction, so Redis may evict buckets (a drained bucket "
	     "evicted is full again); 0 when it may not; -1 when it cannot "
	     "be known (CONFIG GET and INFO refused).");
	for (s = 0; s < n; s++) {
		const sluice_redis_metrics_t *m;
		uint64_t worst = 0;

		/* The worst any running client saw. */
		for (m = reg.blocks; m; m = m->next)
			if (ld(&m->known[s]) && ld(&m->evict[s]) > worst)
				worst = ld(&m->evict[s]);
		sluice_buf_printf(
			out, "sluice_redis_eviction_policy_unsafe{node=\"");
		sluice_buf_label(out, names[s]);
		sluice_buf_puts(out, worst == 3	  ? "\"} 1\n"
				     : worst == 1 ? "\"} 0\n"
						  : "\"} -1\n");
	}
}

/* The calls' latency and failures on nodes 0..n (the lock held). */
static void render_calls(sluice_buf_t *out, size_t n)
{
	size_t s, b, e;

	head(out, "sluice_redis_call_duration_seconds", "histogram",
	     "From a call to the node to its answer or its timeout.");
	for (s = 0; s < n; s++) {
		uint64_t cum = 0;

		for (b = 0; b <= BUCKETS; b++) {
			cum += SUM(latency[s][b], 0);
			line(out, "sluice_redis_call_duration_seconds_bucket",
			     names[s], "le",
			     b < BUCKETS ? bucket_le[b] : "+Inf", cum);
		}
		sluice_buf_puts(
			out, "sluice_redis_call_duration_seconds_sum{node=\"");
		sluice_buf_label(out, names[s]);
		sluice_buf_printf(out, "\"} %.9f\n",
				  (double)SUM(latency_sum_ns[s], 0) / 1e9);
		line(out, "sluice_redis_call_duration_seconds_count", names[s],
		     NULL, NULL, cum);
	}
	head(out, "sluice_redis_errors_total", "counter",
	     "Failures by kind: timeout, connection, auth (handshake refused), "
	     "protocol (a reply not understood), moved_ask "
	     "(cluster redirections followed), tls (handshake failed), "
	     "no_master (no Sentinel named a usable master), refused (the "
	     "server answered a call with an error), noperm (refused by an "
	     "ACL), oom (refused: maxmemory reached), saturated (not sent: "
	     "every connection already carried 2048 unanswered commands).");
	for (s = 0; s < n; s++)
		for (e = 1; e < SLUICE_REDIS_ERRORS; e++)
			if (error_kind[e])
				line(out, "sluice_redis_errors_total", names[s],
				     "kind", error_kind[e],
				     SUM(errors[s][e], 0));
}

void sluice_redis_metrics_render(sluice_buf_t *out)
{
	size_t n;

	pthread_mutex_lock(&reg.lock);
	n = reg.n;
	if (n) {
		render_gauges(out, n);
		render_calls(out, n);
	}
	pthread_mutex_unlock(&reg.lock);
}

/* The kind of node s's last failure as a client not able to use it
 * reported it ("" when none did). */
static const char *last_kind(size_t s)
{
	const sluice_redis_metrics_t *m;

	for (m = reg.blocks; m; m = m->next) {
		uint64_t k = ld(&m->last_kind[s]);

		if (ld(&m->known[s]) && !ld(&m->up[s]) && k > 0 &&
		    k < SLUICE_REDIS_ERRORS && error_kind[k])
			return error_kind[k];
	}
	return "";
}

void sluice_redis_metrics_unready(sluice_buf_t *out)
{
	size_t s, n, listed = 0;

	pthread_mutex_lock(&reg.lock);
	n = reg.n;
	for (s = 0; s < n; s++) {
		uint64_t known = SUM(known[s], 0), up = SUM(up[s], 1);

		if (!known || up == known)
			continue;
		sluice_buf_puts(out, listed++ ? ",{\"node\":\""
					      : ",\"nodes\":[{\"node\":\"");
		sluice_buf_json_str(out, names[s], strlen(names[s]));
		sluice_buf_puts(out, "\",\"error\":\"");
		sluice_buf_puts(out, last_kind(s));
		sluice_buf_puts(out, "\",\"last_error\":\"");
		sluice_buf_json_str(out, last_error[s], strlen(last_error[s]));
		sluice_buf_puts(out, "\"}");
	}
	if (listed)
		sluice_buf_puts(out, "]");
	pthread_mutex_unlock(&reg.lock);
}

const sluice_store_exposition_t sluice_redis_exposition = {
	.render = sluice_redis_metrics_render,
	.unready = sluice_redis_metrics_unready,
};
