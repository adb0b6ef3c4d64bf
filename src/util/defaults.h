/*
 * defaults.h -- the default of every setting sluice has, the one place each
 * is written.  The config starts from these (policy/config/config.c),
 * the stores and the Redis client fall back on them for a field left 0 or
 * NULL, the Node binding reads them from bindings/node/lib/defaults.js, which
 * scripts/gen_defaults.py writes from this file (tests/unit/test_defaults.py
 * fails when it is stale), and the same test checks that docs/CONFIG.md
 * states each default as written here.
 *
 * The scripts read this file, so its rows keep one form: a comment naming
 * the setting as docs/CONFIG.md writes it (its first word; "node:" first
 * for a default of the Node binding alone), then
 *
 *	#define SLUICE_DEFAULT_<NAME> <value>
 *
 * <value> a decimal integer (a C suffix such as ull allowed) or a "string".
 * A new default is a row here; docs/ARCHITECTURE.md lists what else a new
 * setting touches.
 */
#ifndef SLUICE_UTIL_DEFAULTS_H
#define SLUICE_UTIL_DEFAULTS_H

/* listen */
#define SLUICE_DEFAULT_LISTEN "127.0.0.1:8080"
/* threads */
#define SLUICE_DEFAULT_THREADS 1
/* ipv6_prefix */
#define SLUICE_DEFAULT_IPV6_PREFIX 64

/* store.memory.max_keys: the memory and shared stores' bound, and the
 * local fallback's beside Redis (store.redis.max_keys) */
#define SLUICE_DEFAULT_MAX_KEYS 1000000
/* store.redis.url: a Redis store with neither url nor sentinel */
#define SLUICE_DEFAULT_REDIS_URL "redis://127.0.0.1:6379"
/* store.redis.key_prefix (and store.redis_cluster's) */
#define SLUICE_DEFAULT_KEY_PREFIX "sluice:"
/* store.redis.timeout_ms (and store.redis_cluster's) */
#define SLUICE_DEFAULT_STORE_TIMEOUT_MS 50
/* store.redis.connections (and store.redis_cluster's): per thread */
#define SLUICE_DEFAULT_CONNECTIONS 1
/* node: store.redis.timeoutMs.  How long a Node call waits for Redis by
 * default: above the p99.9 of Redis answers a Node app sees on a busy
 * 2-core host (docs/BENCHMARKS.md, node_timeout: 228 ms with 64 takes in
 * flight, 49 ms with 8), so that a loaded host alone does not send
 * decisions to the local fallback. */
#define SLUICE_DEFAULT_NODE_TIMEOUT_MS 250

/* http.max_header_bytes */
#define SLUICE_DEFAULT_MAX_HEADER_BYTES 8192
/* http.max_body_bytes */
#define SLUICE_DEFAULT_MAX_BODY_BYTES 16384
/* http.idle_timeout_ms */
#define SLUICE_DEFAULT_IDLE_TIMEOUT_MS 30000
/* http.max_connection_age_ms: never.  An HTTP/1.1 client (nginx's
 * upstream keepalive, Envoy's HTTP cluster) opens and drops connections as
 * its load comes and goes, so they spread by themselves; docs/CONFIG.md
 * says when to set it. */
#define SLUICE_DEFAULT_HTTP_MAX_AGE_MS 0

/* grpc.max_message_bytes: Envoy's rate limit requests are well under a
 * kilobyte */
#define SLUICE_DEFAULT_GRPC_MAX_MESSAGE 65536
/* grpc.max_connection_age_ms: a day, as envoyproxy/ratelimit's */
#define SLUICE_DEFAULT_GRPC_MAX_AGE_MS 86400000ull
/* grpc.max_connection_age_grace_ms: then an hour's grace, as theirs */
#define SLUICE_DEFAULT_GRPC_MAX_AGE_GRACE_MS 3600000ull

#endif /* SLUICE_UTIL_DEFAULTS_H */
