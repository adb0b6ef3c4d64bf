/*
 * rls_internal.h -- between the RLS engine's decision (rls.c: each
 * descriptor classified, the take made) and its answer (rls_answer.c:
 * statuses, headers, metadata and counts from what the take decided).
 */
#ifndef SLUICE_POLICY_ENVOY_RLS_INTERNAL_H
#define SLUICE_POLICY_ENVOY_RLS_INTERNAL_H

#include "policy/envoy/config.h"
#include "policy/envoy/rls.h"
#include "policy/request.h"

#include <stdint.h>

/* What became of one request descriptor before the store. */
typedef enum {
	D_NONE = 0,  /* no limit applies: OK without current_limit */
	D_UNLIMITED, /* unlimited: OK, limit_remaining UINT32_MAX */
	D_BLOCKED,   /* requests_per_unit 0: always over */
	D_CHARGE,    /* a bucket set to charge */
} dkind_t;

typedef struct desc_s {
	dkind_t kind;
	const sluice_envoy_limit_t *limit; /* config limit, NULL: override */
	const sluice_rule_t *rule;
	const sluice_limit_set_t *set;
	sluice_envoy_unit_limit_t units[SLUICE_MAX_LIMITS];
	int shadow;
	int quota;    /* quota_mode: over only when every quota one is */
	size_t match; /* index in the take (D_CHARGE, not settled) */
	uint64_t cost;
	uint64_t charge; /* the cost the take asks of its buckets */
	/* Decided before the take's last round (a shadow_mode descriptor,
	 * charged on its own; a quota descriptor found over): its result,
	 * kept while the rest is taken again (quota_retake()). */
	int settled;
	sluice_match_result_t res;
	sluice_envoy_series_t *series;	  /* NULL: not counted */
	sluice_limit_set_t oset;	  /* a request-supplied limit */
	const char *name;		  /* for headers */
	const struct sluice_meta_s *meta; /* the node's metadata */
} desc_t;

typedef struct rls_ctx_s {
	sluice_svc_t *svc;
	sluice_live_t *live;
	const sluice_envoy_config_t *cfg;
	const sluice_rls_request_t *req;
	sluice_rls_cb cb;
	void *arg;
	sluice_take_t *t;
	desc_t *d;
	int blocked; /* a descriptor is always over: nothing is charged */
} rls_ctx_t;

/* A cost above every capacity can never pass, whatever its size: the
 * store gets capacity + 1 (a client's hits_addend of 2^64 - 1 must not
 * reach a store's arithmetic). */
uint64_t sluice_rls__clamp_cost(uint64_t cost, const sluice_limit_set_t *set);

/* Answers the request (x->cb) from the take's verdict v (NULL: nothing
 * was taken) and frees x with what it holds. */
void sluice_rls__finish(rls_ctx_t *x, const sluice_verdict_t *v);

#endif
