/*
 * svc.h -- what request handling needs from the thread it runs on: the
 * policy engine's per-thread context, the same for every front end (HTTP
 * in src/serve, gRPC in src/grpc, and the Envoy RLS engine, envoy/rls.h).
 *
 * One per event-loop thread (serve/server.c), or one per fuzz run: the
 * current config, the decision backend, the thread's counters.  Nothing
 * here knows about sockets, so tests and fuzzers drive request handling
 * from memory.
 */
#ifndef SLUICE_POLICY_SVC_H
#define SLUICE_POLICY_SVC_H

#include "policy/counters.h"
#include "policy/live.h"
#include "policy/verdict.h"

typedef struct sluice_svc_s {
	sluice_live_t *live; /* this thread's current config (one ref) */
	sluice_backend_t backend;
	sluice_metrics_t *metrics;
	/* The memory store GET /metrics reports when the backend has no
	 * stats of its own (Redis: the on_store_error local store). */
	sluice_memstore_t *stats_store;
	int draining; /* SIGTERM: readyz fails, conns close */
	/* The thread's take, lent to one request at a time by
	 * sluice_take_get() (request.h); the others get one of their own.
	 * The host gives it (sluice_take_new()) and frees it at the end;
	 * NULL: every request has its own. */
	sluice_take_t *spare;
	int spare_lent;
} sluice_svc_t;

#endif /* SLUICE_POLICY_SVC_H */
