/*
 * rls.h -- Envoy's rate limit service (RLS) decided by sluice: the engine
 * that both front ends (gRPC ShouldRateLimit in src/grpc/, and the HTTP
 * POST /json endpoint in src/serve/) call.  Plain C structs, no protobuf:
 * each front end converts its wire format to and from these.
 *
 * The engine is part of the policy engine (it decides through
 * policy/verdict.h); the front ends convert their wire format only:
 *   - src/grpc/rls.c converts protobuf-c RateLimitRequest ->
 *     sluice_rls_request_t, calls sluice_rls_decide(), converts
 *     sluice_rls_response_t -> RateLimitResponse;
 *   - src/serve/rls_json.c does the same from and to JSON.
 * Both pass the loop thread's sluice_svc_t (policy/svc.h), whose live config
 * snapshot holds the loaded envoy config directory (config.h).
 */
#ifndef SLUICE_POLICY_ENVOY_RLS_H
#define SLUICE_POLICY_ENVOY_RLS_H

#include <stddef.h>
#include <stdint.h>

/* Envoy's RateLimitResponse.RateLimit.Unit values (same numbers). */
typedef enum {
	SLUICE_RLS_UNIT_UNKNOWN = 0,
	SLUICE_RLS_UNIT_SECOND = 1,
	SLUICE_RLS_UNIT_MINUTE = 2,
	SLUICE_RLS_UNIT_HOUR = 3,
	SLUICE_RLS_UNIT_DAY = 4,
	SLUICE_RLS_UNIT_MONTH = 5,
	SLUICE_RLS_UNIT_YEAR = 6,
	SLUICE_RLS_UNIT_WEEK = 7,
} sluice_rls_unit_t;

/* Envoy's RateLimitResponse.Code values (same numbers). */
typedef enum {
	SLUICE_RLS_CODE_UNKNOWN = 0,
	SLUICE_RLS_CODE_OK = 1,
	SLUICE_RLS_CODE_OVER_LIMIT = 2,
} sluice_rls_code_t;

typedef struct sluice_rls_entry_s {
	const char *key; /* borrowed, NUL-terminated (front end owns) */
	const char *value;
} sluice_rls_entry_t;

typedef struct sluice_rls_descriptor_s {
	const sluice_rls_entry_t *entries;
	size_t nentries;
	int has_limit; /* RateLimitDescriptor.limit override present */
	uint32_t limit_requests_per_unit;
	sluice_rls_unit_t limit_unit;
	int has_hits_addend; /* per-descriptor hits_addend present */
	uint64_t hits_addend;
} sluice_rls_descriptor_t;

typedef struct sluice_rls_request_s {
	const char *domain;
	const sluice_rls_descriptor_t *descriptors;
	size_t ndescriptors;
	uint32_t hits_addend; /* 0 means 1 */
} sluice_rls_request_t;

typedef struct sluice_rls_header_s {
	char *key; /* owned by the response */
	char *value;
} sluice_rls_header_t;

typedef struct sluice_rls_status_s {
	sluice_rls_code_t code;
	int has_limit;	  /* current_limit present (a limit matched) */
	char *limit_name; /* may be NULL; owned by the response */
	uint32_t requests_per_unit;
	sluice_rls_unit_t unit;
	uint32_t limit_remaining;
	uint64_t duration_until_reset_ms; /* 0 when not set */
	/* The matched node's `metadata:` (borrowed from the config; read
	 * before the answer is handed over, then not). */
	const struct sluice_meta_s *config_metadata;
} sluice_rls_status_t;

typedef struct sluice_rls_response_s {
	int status; /* 0, or a negative SLUICE_E* (then the front end answers
		       an error: UNAVAILABLE / 500 and so on) */
	const char *error; /* message when status < 0; static or owned */
	sluice_rls_code_t overall_code;
	sluice_rls_status_t
		*statuses; /* one per request descriptor, in order */
	size_t nstatuses;
	sluice_rls_header_t *headers; /* response_headers_to_add */
	size_t nheaders;
	/* envoy.response_dynamic_metadata: a STRUCT (meta.h), owned;
	 * NULL: none. */
	struct sluice_meta_s *dynamic_metadata;
} sluice_rls_response_t;

struct sluice_meta_s; /* src/policy/envoy/meta.h */
struct sluice_svc_s;  /* src/policy/svc.h: the loop thread's config + backend */

typedef void (*sluice_rls_cb)(void *arg, sluice_rls_response_t *resp);

/* Decides req.  cb runs exactly once (possibly before this returns) with a
 * response the caller must free with sluice_rls_response_free().  req and
 * everything it points to must stay valid until cb runs.  Returns 0, or a
 * negative code when the request is malformed (cb will not run); then
 * errbuf says why (front end: INVALID_ARGUMENT / 400). */
int sluice_rls_decide(struct sluice_svc_s *svc, const sluice_rls_request_t *req,
		      sluice_rls_cb cb, void *arg, char *errbuf, size_t errlen);
/* Frees everything the response holds, and the response itself. */
void sluice_rls_response_free(sluice_rls_response_t *resp);
/* 1 when the store can answer (health checks). */
int sluice_rls_healthy(struct sluice_svc_s *svc);
/* The envoy config the thread's live snapshot holds (svc->live) is what
 * sluice_rls_decide() uses; a request for a domain no file defines is
 * answered OK for every descriptor without a limit, as envoyproxy/ratelimit
 * does (docs/ENVOY.md). */

#endif /* SLUICE_POLICY_ENVOY_RLS_H */
