/*
 * metrics.h -- GET /metrics (Prometheus text format 0.0.4): the HTTP
 * server's own counting and the exposition of every thread's counters
 * (policy/counters.h).
 */
#ifndef SLUICE_SERVE_METRICS_H
#define SLUICE_SERVE_METRICS_H

#include "policy/counters.h"
#include "sluice.h"
#include "store/store.h"
#include "util/buf.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The reason label of sluice_grpc_connections_refused_total. */
extern const char *const sluice_grpc_refusal_names[SLUICE_GRPC_REFUSALS];

void sluice_metrics_response(sluice_metrics_t *m, int status,
			     uint64_t elapsed_ns);

/* One measurement of the calling loop thread's lag (util/loop_lag.h). */
void sluice_metrics_loop_lag(sluice_metrics_t *m, uint64_t lag_ns);

/* Process-wide events (any thread). */
/* What started a config reload (its label in
 * sluice_config_reloads_total). */
#define SLUICE_RELOAD_SIGHUP	 0
#define SLUICE_RELOAD_CONFIG_DIR 1
#define SLUICE_RELOAD_XDS	 2 /* a control plane's update (envoy.xds) */
void sluice_metrics_reload(int ok, int trigger);

/* What the configured store adds to GET /metrics and to the body of
 * /readyz's 503 (sluice_store_exposition_t, store/store.h).  Set once,
 * before any loop thread runs; unset, a store adds nothing.  So nothing
 * here knows which store it is. */
void sluice_metrics_set_store(const sluice_store_exposition_t *x);
/* Appends the store's part of the /readyz 503 body (may be nothing). */
void sluice_metrics_store_unready(sluice_buf_t *out);

/* Appends the whole exposition; stats may be NULL.  envoy_style
 * (SLUICE_ENVOY_METRICS_* of policy/envoy/metrics.h, envoy.metrics) says
 * in whose names the Envoy counts are shown: sluice's, envoyproxy/
 * ratelimit's (as a statsd_exporter maps them) or both. */
void sluice_metrics_render(sluice_buf_t *out,
			   const sluice_memstore_stats_t *stats,
			   int envoy_style);

#endif /* SLUICE_SERVE_METRICS_H */
