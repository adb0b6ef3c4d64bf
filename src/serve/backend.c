/*
 * backend.c -- deciding a whole request over a store driver.
 *
 * This is the one place that knows about several rules per request, shadow
 * rules and on_store_error.  The flow for one request:
 *
 *   shadow rules    charged on their own, in parallel with everything
 *                   else; their rejections are counted, never enforced
 *   one enforcing   charged directly (the common case: one store call)
 *   several         PEEK all (cost 0) -> if every one would pass, CHARGE
 *                   all; else CONFIRM the rejecting ones (a real take that
 *                   rejects without charging and yields the exact
 *                   retry_after), the others are SKIPPED (not charged)
 *
 * Calls run in parallel; `pending` counts them, plus one reference held by
 * the code issuing them so that a driver answering synchronously cannot
 * finish a phase while it is still being started.
 */
#include "serve/backend.h"

#include <stdio.h>
#include <string.h>

enum { PHASE_PEEK = 1, PHASE_CHARGE, PHASE_CONFIRM };

/* ---------------------------------------------------------- memory store */

/* A take on a memory store, reporting which limit the summary is. */
static int mem_take(sluice_memstore_t *store, const sluice_match_t *m,
		    uint64_t cost, int *allowed, sluice_decision_t *summary,
		    size_t *which)
{
	const sluice_limit_set_t *set = m->set;
	sluice_decision_t d[SLUICE_MAX_LIMITS];
	size_t i;
	int r;

	r = sluice_memstore_take(store, m->key, m->keylen, set->limits,
				 set->nlimits, cost, sluice_now_us(), d,
				 summary);
	if (r < 0)
		return r;
	*allowed = r;
	*which = 0;
	*summary = d[0];
	for (i = 1; i < set->nlimits; i++)
		if (sluice_decision_merge(summary, &d[i]))
			*which = i;
	return 0;
}

static int memory_take(void *impl, const void *key, size_t keylen,
		       const sluice_limit_t *limits, size_t nlimits,
		       uint64_t cost, sluice_store_cb cb, void *arg)
{
	sluice_decision_t d[SLUICE_MAX_LIMITS], summary;
	size_t i, which = 0;
	int r;

	if (nlimits == 0 || nlimits > SLUICE_MAX_LIMITS)
		return SLUICE_EINVAL;
	r = sluice_memstore_take(impl, key, keylen, limits, nlimits, cost,
				 sluice_now_us(), d, &summary);
	if (r < 0) {
		cb(arg, r, 0, NULL, 0);
		return 0;
	}
	summary = d[0];
	for (i = 1; i < nlimits; i++)
		if (sluice_decision_merge(&summary, &d[i]))
			which = i;
	cb(arg, 0, r, &summary, which);
	return 0;
}

static int memory_healthy(void *impl)
{
	return 1;
}

static void memory_stats(void *impl, sluice_memstore_stats_t *out)
{
	sluice_memstore_stats(impl, out);
}

static void memory_free(void *impl)
{
	/* The store is shared by every thread and outlives configs. */
}

const sluice_store_ops_t sluice_memory_store_ops = {
	.name = "memory",
	.take = memory_take,
	.healthy = memory_healthy,
	.stats = memory_stats,
	.free = memory_free,
};

/* ------------------------------------------------------------ lifecycle */

int sluice_backend_open(sluice_backend_t *be,
			const sluice_store_config_t *store, void *loop,
			sluice_memstore_t *shared, char *err, size_t errlen)
{
	memset(be, 0, sizeof(*be));
	be->local = shared;
	switch (store->kind) {
	case SLUICE_STORE_MEMORY:
		be->ops = &sluice_memory_store_ops;
		be->impl = shared;
		return 0;
	case SLUICE_STORE_REDIS:
	case SLUICE_STORE_REDIS_CLUSTER:
		if (sluice_redis_store_open(&be->impl, store, loop, err,
					    errlen) < 0)
			return SLUICE_EINVAL;
		be->ops = &sluice_redis_store_ops;
		return 0;
	default:
		snprintf(err, errlen, "store: unknown kind %d",
			 (int)store->kind);
		return SLUICE_EINVAL;
	}
}

void sluice_backend_close(sluice_backend_t *be)
{
	if (be->ops && be->ops->free)
		be->ops->free(be->impl);
	be->ops = NULL;
	be->impl = NULL;
}

int sluice_backend_healthy(sluice_backend_t *be)
{
	return be->ops && (!be->ops->healthy || be->ops->healthy(be->impl));
}

/* ------------------------------------------------------------- deciding */

static void phase_done(sluice_take_t *t);

static void unref(sluice_take_t *t)
{
	if (--t->pending == 0)
		phase_done(t);
}

/* Applies the rule's on_store_error to a failed call.  Returns 1 when the
 * local store produced a decision instead (in allowed, d, which). */
static int store_failed(sluice_take_t *t, size_t i, uint64_t cost, int *allowed,
			sluice_decision_t *d, size_t *which)
{
	const sluice_rule_t *rule = t->matches[i].rule;
	sluice_match_result_t *r = &t->results[i];

	r->store_err = 1;
	if (rule->on_store_error == SLUICE_FAIL_LOCAL && t->be->local &&
	    mem_take(t->be->local, &t->matches[i], cost, allowed, d, which) ==
		    0) {
		r->local = 1;
		return 1;
	}
	r->decided = 0;
	if (rule->on_store_error == SLUICE_FAIL_CLOSED && !rule->shadow)
		r->outcome = SLUICE_OUT_ERROR_CLOSED;
	else
		r->outcome = SLUICE_OUT_ERROR_OPEN;
	return 0;
}

static void on_store(void *arg, int status, int allowed,
		     const sluice_decision_t *summary, size_t which)
{
	struct sluice_take_call_s *call = arg;
	sluice_take_t *t = call->t;
	size_t i = call->i;
	sluice_match_result_t *r = &t->results[i];
	int peek = !t->matches[i].rule->shadow && t->phase == PHASE_PEEK;
	uint64_t cost = peek ? 0 : t->costs[i];
	sluice_decision_t d;

	if (status == 0) {
		d = *summary;
	} else if (!store_failed(t, i, cost, &allowed, &d, &which)) {
		unref(t);
		return;
	}
	r->decided = 1;
	r->which = which;
	r->d = d;
	if (peek) /* would the real cost pass? */
		allowed = !d.never && t->costs[i] <= d.remaining;
	r->d.allowed = allowed;
	r->outcome = allowed ? SLUICE_OUT_ALLOWED : SLUICE_OUT_LIMITED;
	unref(t);
}

static void issue(sluice_take_t *t, size_t i, uint64_t cost)
{
	const sluice_match_t *m = &t->matches[i];
	struct sluice_take_call_s *call = &t->calls[i];
	int r;

	call->t = t;
	call->i = i;
	t->pending++;
	r = t->be->ops->take(t->be->impl, m->key, m->keylen, m->set->limits,
			     m->set->nlimits, cost, on_store, call);
	if (r < 0)
		on_store(call, r, 0, NULL, 0);
}

static void finish(sluice_take_t *t)
{
	sluice_verdict_t *v = &t->verdict;
	int shadow_pass;
	size_t i;

	memset(v, 0, sizeof(*v));
	v->allowed = 1;
	v->report = -1;
	/* Enforcing rules first; shadow decisions only when no enforcing
	 * rule produced one. */
	for (shadow_pass = 0; shadow_pass < 2 && v->report < 0; shadow_pass++)
		for (i = 0; i < t->nmatches; i++) {
			const sluice_match_result_t *r = &t->results[i];

			if (!!t->matches[i].rule->shadow != shadow_pass)
				continue;
			if (!shadow_pass) {
				if (r->outcome == SLUICE_OUT_LIMITED)
					v->allowed = 0;
				if (r->outcome == SLUICE_OUT_ERROR_CLOSED)
					v->status = SLUICE_ESTORE;
			}
			if (!r->decided)
				continue;
			if (v->report < 0) {
				v->summary = r->d;
				v->which = r->which;
				v->report = (int)i;
			} else if (sluice_decision_merge(&v->summary, &r->d)) {
				v->which = r->which;
				v->report = (int)i;
			}
		}
	if (v->status)
		v->allowed = 0;
	t->finished = 1;
	t->cb(t->arg, v);
}

static void phase_done(sluice_take_t *t)
{
	size_t i;
	int rejected = 0, closed = 0;

	if (t->phase != PHASE_PEEK) {
		finish(t);
		return;
	}
	for (i = 0; i < t->nmatches; i++) {
		if (t->matches[i].rule->shadow)
			continue;
		if (t->results[i].outcome == SLUICE_OUT_LIMITED)
			rejected = 1;
		if (t->results[i].outcome == SLUICE_OUT_ERROR_CLOSED)
			closed = 1;
	}
	if (closed) {
		for (i = 0; i < t->nmatches; i++)
			if (!t->matches[i].rule->shadow &&
			    t->results[i].outcome == SLUICE_OUT_ALLOWED)
				t->results[i].outcome = SLUICE_OUT_SKIPPED;
		finish(t);
		return;
	}
	t->phase = rejected ? PHASE_CONFIRM : PHASE_CHARGE;
	t->pending = 1;
	for (i = 0; i < t->nmatches; i++) {
		sluice_match_result_t *r = &t->results[i];

		if (t->matches[i].rule->shadow || !r->decided)
			continue; /* shadow: done; failed open: not charged */
		if (r->outcome == SLUICE_OUT_LIMITED)
			issue(t, i, t->costs[i]);
		else if (!rejected)
			issue(t, i, t->costs[i]);
		else
			r->outcome = SLUICE_OUT_SKIPPED;
	}
	unref(t);
}

void sluice_backend_take(sluice_backend_t *be, sluice_take_t *t,
			 sluice_backend_cb cb, void *arg)
{
	size_t i, enforcing = 0;

	t->be = be;
	t->cb = cb;
	t->arg = arg;
	t->finished = 0;
	if (t->nmatches > SLUICE_MAX_MATCHES)
		t->nmatches = SLUICE_MAX_MATCHES;
	memset(t->results, 0, sizeof(t->results[0]) * t->nmatches);
	for (i = 0; i < t->nmatches; i++)
		if (!t->matches[i].rule->shadow)
			enforcing++;
	t->phase = enforcing > 1 ? PHASE_PEEK : PHASE_CHARGE;
	t->pending = 1; /* held while issuing */
	for (i = 0; i < t->nmatches; i++) {
		if (t->matches[i].rule->shadow || enforcing == 1)
			issue(t, i, t->costs[i]);
		else
			issue(t, i, 0);
	}
	unref(t);
}
