/*
 * grpc_tables.h -- the gRPC listener's two tables, each written once:
 * the methods it serves and the reasons it cuts a connection off.  The
 * listener (src/grpc/), the counters (counters.h) and /metrics
 * (src/serve/metrics.c) all expand these rows, so a new method or reason
 * is one row here: its counters, its label and its dispatch follow.
 */
#ifndef SLUICE_POLICY_GRPC_TABLES_H
#define SLUICE_POLICY_GRPC_TABLES_H

/*
 * X(id, path, label, handle, update): one row per method, in the order of
 * their index (the row of their counters; "other", any other path, comes
 * after the last).  `label` names the method in /metrics; `handle` and
 * `update` are the listener's functions (src/grpc/internal.h's
 * grpc_method_t: `update` is NULL for a unary method).
 */
#define SLUICE_GRPC_METHOD_ROWS(X)                                             \
	X(SHOULD_RATE_LIMIT,                                                   \
	  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",      \
	  "ShouldRateLimit", grpc_rls_should_rate_limit, NULL)                 \
	X(HEALTH_CHECK, "/grpc.health.v1.Health/Check", "Health/Check",        \
	  grpc_health_check, NULL)                                             \
	X(HEALTH_WATCH, "/grpc.health.v1.Health/Watch", "Health/Watch",        \
	  grpc_health_watch, grpc_health_watch_update)

#define SLUICE_GRPC_METHOD_ENUM_(id, path, label, handle, update)              \
	SLUICE_GRPC_METHOD_##id,
enum {
	SLUICE_GRPC_METHOD_ROWS(SLUICE_GRPC_METHOD_ENUM_)
		SLUICE_GRPC_METHOD_OTHER, /* any other path */
	SLUICE_GRPC_METHODS		  /* the rows with "other" */
};
#undef SLUICE_GRPC_METHOD_ENUM_

/*
 * X(id, label, text): why a connection is cut off, the reason label of
 * sluice_grpc_connections_refused_total and the log's words.
 */
#define SLUICE_GRPC_REFUSAL_ROWS(X)                                            \
	X(RESET_FLOOD, "reset_flood", "too many streams reset (rapid reset)")  \
	X(FRAME_FLOOD, "frame_flood",                                          \
	  "too many control frames (PING, SETTINGS)")                          \
	X(HEADER_FLOOD, "header_flood", "endless CONTINUATION frames")         \
	X(PROTOCOL, "protocol_error", "an HTTP/2 protocol error")

#define SLUICE_GRPC_REFUSAL_ENUM_(id, label, text) SLUICE_GRPC_REFUSE_##id,
enum {
	SLUICE_GRPC_REFUSAL_ROWS(SLUICE_GRPC_REFUSAL_ENUM_)
		SLUICE_GRPC_REFUSALS /* the number of reasons */
};
#undef SLUICE_GRPC_REFUSAL_ENUM_

#endif /* SLUICE_POLICY_GRPC_TABLES_H */
