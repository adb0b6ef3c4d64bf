/*
 * metrics.h -- GET /metrics (Prometheus text format 0.0.4): the HTTP
 * server's own counting and the exposition of every thread's counters
 * (policy/counters.h).
 */
#ifndef SLUICE_SERVE_METRICS_H
#define SLUICE_SERVE_METRICS_H

#include "policy/counters.h"
#include "sluice.h"
#include "util/buf.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

void sluice_metrics_response(sluice_metrics_t *m, int status,
			     uint64_t elapsed_ns);

/* Process-wide events (any thread). */
void sluice_metrics_reload(int ok);

/* Appends the whole exposition; stats may be NULL. */
void sluice_metrics_render(sluice_buf_t *out,
			   const sluice_memstore_stats_t *stats);

#endif /* SLUICE_SERVE_METRICS_H */
