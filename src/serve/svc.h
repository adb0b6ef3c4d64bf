/*
 * svc.h -- what request handling needs from the thread it runs on.
 *
 * One per event-loop thread (server.c), or one per fuzz run: the current
 * config, the decision backend, the thread's metrics.  Nothing here knows
 * about sockets, so tests and fuzzers drive request handling from memory.
 */
#ifndef SLUICE_SERVE_SVC_H
#define SLUICE_SERVE_SVC_H

#include "serve/live.h"
#include "serve/metrics.h"
#include "serve/verdict.h"

typedef struct sluice_svc_s {
	sluice_live_t *live; /* this thread's current config (one ref) */
	sluice_backend_t backend;
	sluice_metrics_t *metrics;
	sluice_memstore_t *store; /* the shared memory store (stats) */
	int draining;		  /* SIGTERM: readyz fails, conns close */
	sluice_take_t *spare;	  /* one cached sluice_take_t */
	int admin_apart; /* admin endpoints only on admin.listen's socket */
} sluice_svc_t;

#endif /* SLUICE_SERVE_SVC_H */
