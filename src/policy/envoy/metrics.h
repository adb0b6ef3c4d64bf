/*
 * metrics.h -- envoyproxy/ratelimit's statistics as Prometheus counters.
 *
 * One series per domain and descriptor path, the path as
 * envoyproxy/ratelimit names its stats ("message_type_marketing.to_number":
 * the configured key_value of each level, the key alone where the config
 * gives no value), so the number of series is bounded by the config, not
 * by what clients send.  Only `detailed_metric` and `value_to_metric` put
 * request values into the path; those series are capped at
 * SLUICE_ENVOY_MAX_SERIES series and SLUICE_ENVOY_MAX_SERIES_BYTES label
 * bytes (each value at most SLUICE_ENVOY_MAX_LABEL), after which hits
 * count under the path "_overflow" of their domain.
 *
 *   sluice_envoy_total_hits_total{domain,descriptor}
 *   sluice_envoy_over_limit_total{domain,descriptor}
 *   sluice_envoy_near_limit_total{domain,descriptor}
 *   sluice_envoy_within_limit_total{domain,descriptor}
 *   sluice_envoy_shadow_mode_total{domain,descriptor}
 *   sluice_envoy_domain_not_found_total{domain}
 *   sluice_envoy_global_shadow_mode_total
 *   sluice_envoy_call_errors_total{type="store_error"|"service_error"}
 *
 * counting hits (hits_addend) as envoyproxy/ratelimit does.  The same
 * counts are also shown in envoyproxy/ratelimit's own names, as a
 * statsd_exporter with its default mapping exposes them
 * (SLUICE_ENVOY_METRICS_RATELIMIT: ratelimit_service_rate_limit_total_hits
 * {domain,key1,key2}, ...), so that a dashboard built on it works
 * unchanged.  Series live
 * as long as the process (a reload keeps their counts), and any thread
 * may count: the counters are atomic.
 */
#ifndef SLUICE_POLICY_ENVOY_METRICS_H
#define SLUICE_POLICY_ENVOY_METRICS_H

#include "util/buf.h"

#include <stdatomic.h>
#include <stdint.h>

#define SLUICE_ENVOY_MAX_SERIES 10000
/* A label value (domain, descriptor path) is kept to this many bytes: a
 * longer one keeps its head and ends in "~" and 16 hex digits of a hash
 * of the whole.  And the label bytes of every series together are capped
 * too (past it, new paths count under "_overflow"), so /metrics stays a
 * few megabytes whatever values clients send. */
#define SLUICE_ENVOY_MAX_LABEL	      200
#define SLUICE_ENVOY_MAX_SERIES_BYTES (1024 * 1024)

/* A series whose path is "" counts its domain: domain_not_found. */
typedef struct sluice_envoy_series_s {
	_Atomic uint64_t total_hits, over_limit, near_limit, within_limit,
		shadow_mode, domain_not_found;
	char *domain, *path;
	/* What StatsD was last sent of each counter (the flusher's own:
	 * sluice_envoy_stats_delta()). */
	uint64_t sent[6];
	struct sluice_envoy_series_s *next; /* hash chain */
	struct sluice_envoy_series_s *all;  /* every series, newest first */
} sluice_envoy_series_t;

/* The series of a domain and path (created on first use; thread-safe).
 * Never NULL: out of memory or past the cap, the domain's "_overflow"
 * series, or a static one. */
sluice_envoy_series_t *sluice_envoy_series(const char *domain,
					   const char *path);

/* Adds n, saturating: a counter never wraps to a small number (the
 * engine adds the hits a descriptor was charged, which are bounded, but a
 * counter that wrapped would read as a reset to Prometheus). */
static inline void sluice_envoy_add(_Atomic uint64_t *c, uint64_t n)
{
	uint64_t v = atomic_load_explicit(c, memory_order_relaxed);

	while (!atomic_compare_exchange_weak_explicit(
		c, &v, v > UINT64_MAX - n ? UINT64_MAX : v + n,
		memory_order_relaxed, memory_order_relaxed))
		;
}

/* The label bytes the series hold (domain and path of each). */
size_t sluice_envoy_series_bytes(void);

/* Service-wide counts, as envoyproxy/ratelimit's: a request answered OK
 * only because of the global shadow_mode; a call the store failed; a call
 * refused as malformed. */
typedef enum {
	SLUICE_ENVOY_GLOBAL_SHADOW_MODE = 0,
	SLUICE_ENVOY_STORE_ERROR,   /* should_rate_limit.redis_error */
	SLUICE_ENVOY_SERVICE_ERROR, /* should_rate_limit.service_error */
	SLUICE_ENVOY_SERVICE_COUNTS
} sluice_envoy_service_count_t;
void sluice_envoy_count_service(sluice_envoy_service_count_t which);

/* envoy.import_counters (import.c): an import asked of the store
 * (imported 0), or one that started a bucket with envoyproxy/ratelimit's
 * count (1): sluice_envoy_imported_total, on /metrics once asked. */
void sluice_envoy_count_import(int imported);

/* StatsD (envoy.statsd): cb with each of envoyproxy/ratelimit's stats
 * (its statsd name, "ratelimit.service.rate_limit.messaging.to_number.
 * total_hits") that counted since the last call, and by how much.  One
 * caller only (the flusher on the main loop). */
typedef void (*sluice_envoy_stat_cb)(void *arg, const char *name,
				     uint64_t delta);
void sluice_envoy_stats_delta(sluice_envoy_stat_cb cb, void *arg);

/* Which names /metrics shows the counts under (envoy.metrics). */
#define SLUICE_ENVOY_METRICS_SLUICE    1 /* sluice_envoy_* */
#define SLUICE_ENVOY_METRICS_RATELIMIT 2 /* ratelimit_service_* */

/* Appends the series in Prometheus text, in the names `style` asks for
 * (serve/metrics.c calls it).  The registry's lock is held only to read
 * where the list starts. */
void sluice_envoy_metrics_render(sluice_buf_t *out, int style);

#endif /* SLUICE_POLICY_ENVOY_METRICS_H */
