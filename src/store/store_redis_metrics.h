/*
 * store_redis_metrics.h -- the Redis store's per node series for
 * GET /metrics and its part of /readyz (sluice_store_exposition_t).
 *
 * Each Redis client (one per loop thread) counts into a block of its own,
 * fed by the client's reports (sluice_redis_opts_t.on_report) on its loop
 * thread, its only writer; /metrics reads every block.  Nodes are named
 * "host:port" and numbered process-wide on first sight, so a cluster node
 * found later simply adds series.  `sluice serve` counts the reports
 * through the store hooks (store.h: attach, on_report, detach) and shows
 * them through sluice_redis_exposition; the rest of the server knows
 * nothing of Redis.
 */
#ifndef SLUICE_STORE_STORE_REDIS_METRICS_H
#define SLUICE_STORE_STORE_REDIS_METRICS_H

#include "sluice_redis.h"
#include "store/store.h"
#include "util/buf.h"

typedef struct sluice_redis_metrics_s sluice_redis_metrics_t;

/* A zeroed block, registered for scraping (kept until exit: another
 * thread may be reading it); NULL when out of memory. */
sluice_redis_metrics_t *sluice_redis_metrics_new(void);

/* The client's report callback; arg is the block. */
void sluice_redis_metrics_report(void *arg,
				 const sluice_redis_node_report_t *rep);

/* The block's client is gone: its gauges stop counting. */
void sluice_redis_metrics_retire(sluice_redis_metrics_t *m);

/* Appends the per-node series (nothing when no Redis node was seen). */
void sluice_redis_metrics_render(sluice_buf_t *out);

/* For the /readyz body: appends ,"nodes":[{"node":"host:port",
 * "error":"<kind>","last_error":"..."}, ...] naming each node that a
 * running client cannot use, with the kind of its last failure (the
 * label of sluice_redis_errors_total: "auth", "noperm", ...) and the last
 * error in words a client reported for it ("" when none yet); nothing
 * when there is none.  The words were redacted as the client read them:
 * what it sent (AUTH arguments, keys) never comes back in them. */
void sluice_redis_metrics_unready(sluice_buf_t *out);

/* The two above as what the Redis store adds to /metrics and /readyz. */
extern const sluice_store_exposition_t sluice_redis_exposition;

#endif /* SLUICE_STORE_STORE_REDIS_METRICS_H */
