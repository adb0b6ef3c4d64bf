/*
 * counters.h -- the counters every front end and the verdict engine count
 * into: one block per loop thread.
 *
 * Each loop thread owns one sluice_metrics_t and is its only writer, so
 * counting is a relaxed load and store (no locked instruction, no shared
 * cache line); GET /metrics (serve/metrics.c) sums every thread's block
 * when scraped.  Rules are counted in "slots" keyed by rule name, so
 * counters survive a config reload and a renamed rule simply starts a new
 * series.
 */
#ifndef SLUICE_POLICY_COUNTERS_H
#define SLUICE_POLICY_COUNTERS_H

#include "policy/grpc_tables.h"
#include "util/counter.h"

#include <stddef.h>
#include <stdint.h>

#define SLUICE_METRIC_SLOTS    256 /* distinct rule names; more share the last */
#define SLUICE_METRIC_ADHOC    0   /* slot of POST /v1/take ad-hoc limits */
#define SLUICE_LATENCY_BUCKETS 13

typedef enum {
	SLUICE_RESULT_ALLOWED = 0,
	SLUICE_RESULT_LIMITED,
	SLUICE_RESULT_ERROR, /* the store failed */
	SLUICE_RESULTS
} sluice_result_t;

/* The listeners that may speak TLS (util/tls_server.h), as /metrics
 * labels them (serve/metrics.c). */
enum {
	SLUICE_TLS_HTTP,
	SLUICE_TLS_ADMIN,
	SLUICE_TLS_GRPC,
	SLUICE_TLS_LISTENERS
};

typedef struct sluice_metrics_s {
	sluice_counter_t decisions[SLUICE_METRIC_SLOTS][SLUICE_RESULTS];
	sluice_counter_t shadow_rejections[SLUICE_METRIC_SLOTS];
	sluice_counter_t store_errors[SLUICE_METRIC_SLOTS];
	sluice_counter_t responses[16]; /* by status, see metrics.c */
	sluice_counter_t latency[SLUICE_LATENCY_BUCKETS + 1];
	sluice_counter_t latency_sum_ns;
	/* The loop thread's lag (util/loop_lag.h), one sample every
	 * 100 ms (serve/server.c), in the latency buckets. */
	sluice_counter_t loop_lag[SLUICE_LATENCY_BUCKETS + 1];
	sluice_counter_t loop_lag_sum_ns;
	sluice_counter_t connections; /* open now (gauge) */
	sluice_counter_t accepted;
	sluice_counter_t timeouts;
	/* gRPC calls answered (src/grpc/), by method (ShouldRateLimit,
	 * Health/Check, Health/Watch, any other path) and grpc-status
	 * (0..16). */
	sluice_counter_t grpc_calls[SLUICE_GRPC_METHODS][17];
	sluice_counter_t grpc_connections; /* open now (gauge) */
	sluice_counter_t grpc_accepted;
	sluice_counter_t grpc_refused[SLUICE_GRPC_REFUSALS];
	/* Requests shed while their message arrived (the budget short). */
	sluice_counter_t grpc_shed;
	/* Each gRPC call's time from its request's headers to its answer,
	 * by method, in the latency buckets. */
	sluice_counter_t grpc_latency[SLUICE_GRPC_METHODS]
				     [SLUICE_LATENCY_BUCKETS + 1];
	sluice_counter_t grpc_latency_sum_ns[SLUICE_GRPC_METHODS];
	/* A listener's TLS files changed but could not be used (the
	 * certificate in use was kept), by listener. */
	sluice_counter_t tls_reload_failures[SLUICE_TLS_LISTENERS];
	struct sluice_metrics_s *next;
} sluice_metrics_t;

/* The latency histogram's upper bounds, in nanoseconds (the last
 * bucket, SLUICE_LATENCY_BUCKETS, is everything above). */
extern const uint64_t sluice_latency_bucket_ns[SLUICE_LATENCY_BUCKETS];

/* Counts ns in a latency histogram (SLUICE_LATENCY_BUCKETS + 1 buckets)
 * and its sum. */
void sluice_latency_count(sluice_counter_t *hist, sluice_counter_t *sum,
			  uint64_t ns);

/* A zeroed block, registered for scraping (never freed: it is scraped
 * by other threads). */
sluice_metrics_t *sluice_metrics_new(void);

/* The slot for a rule name (registered on first use; thread-safe). */
uint16_t sluice_metrics_slot(const char *name);

/* Calls fn with every registered block (a list through ->next) and the
 * slot names so far, holding the registry's lock (no slot is added
 * meanwhile). */
void sluice_metrics_visit(void (*fn)(void *arg, const sluice_metrics_t *all,
				     const char *const *names, size_t n),
			  void *arg);

#endif /* SLUICE_POLICY_COUNTERS_H */
