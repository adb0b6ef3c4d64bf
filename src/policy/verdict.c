/*
 * verdict.c -- deciding a whole request over a store: see verdict.h.
 *
 * The flow for one request: the enforcing rules' keys go to the store in
 * one take (all or nothing), each shadow rule's key in a take of its own;
 * they run in parallel.  `pending` counts the takes in flight, plus one
 * reference held while they are being issued, so that a store answering
 * synchronously cannot finish the request while it is still being
 * started.  When the last one is in, finish() folds the results into the
 * verdict.
 */
#include "policy/verdict.h"
#include "policy/ratelimit_headers.h"
#include "util/invariant.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the take */

#define TAKE_MIN 4

int sluice_take_reserve(sluice_take_t *t, size_t n)
{
	void *p;

	if (n <= t->cap)
		return 0;
	/* Each array is grown in turn; a failure leaves the larger ones
	 * in place and cap unchanged, which is still consistent. */
	if (!(p = realloc(t->matches, n * sizeof(*t->matches))))
		return SLUICE_ENOMEM;
	t->matches = p;
	if (!(p = realloc(t->costs, n * sizeof(*t->costs))))
		return SLUICE_ENOMEM;
	t->costs = p;
	if (!(p = realloc(t->results, n * sizeof(*t->results))))
		return SLUICE_ENOMEM;
	t->results = p;
	if (!(p = realloc(t->items, n * sizeof(*t->items))))
		return SLUICE_ENOMEM;
	t->items = p;
	if (!(p = realloc(t->order, n * sizeof(*t->order))))
		return SLUICE_ENOMEM;
	t->order = p;
	if (!(p = realloc(t->calls, (n + 1) * sizeof(*t->calls))))
		return SLUICE_ENOMEM;
	t->calls = p;
	t->cap = n;
	return 0;
}

sluice_take_t *sluice_take_new(void)
{
	sluice_take_t *t = calloc(1, sizeof(*t));

	if (t && sluice_take_reserve(t, TAKE_MIN) < 0) {
		sluice_take_free(t);
		return NULL;
	}
	return t;
}

void sluice_take_free(sluice_take_t *t)
{
	if (!t)
		return;
	free(t->matches);
	free(t->costs);
	free(t->results);
	free(t->items);
	free(t->order);
	free(t->calls);
	free(t);
}

int sluice_take_match(sluice_take_t *t, const sluice_config_t *cfg,
		      const sluice_request_t *req)
{
	size_t n, i;

	n = sluice_rules_match(cfg, req, t->matches, t->cap);
	while (n == t->cap && t->cap < cfg->nrules) {
		/* Maybe more: twice the room (a take grows with what its
		 * requests match, not with the config), and match again. */
		size_t want =
			t->cap * 2 < cfg->nrules ? t->cap * 2 : cfg->nrules;

		if (sluice_take_reserve(t, want) < 0)
			return SLUICE_ENOMEM;
		n = sluice_rules_match(cfg, req, t->matches, t->cap);
	}
	for (i = 0; i < n; i++)
		t->costs[i] = t->matches[i].rule->cost;
	t->nmatches = n;
	return 0;
}

/* ------------------------------------------------------------- deciding */

static void finish(sluice_take_t *t);

static void unref(sluice_take_t *t)
{
	SLUICE_ASSERT(t->pending > 0 && !t->finished);
	if (--t->pending == 0)
		finish(t);
}

/* Records the answer of a take over items[first .. first + n). */
static void record(sluice_take_t *t, size_t first, size_t n, int allowed,
		   int local)
{
	size_t k;

	for (k = first; k < first + n; k++) {
		const sluice_take_item_t *it = &t->items[k];
		sluice_match_result_t *r = &t->results[t->order[k]];

		r->decided = 1;
		r->local = local;
		r->d = it->summary;
		r->which = it->summary.which;
		if (allowed)
			r->outcome = SLUICE_OUT_ALLOWED;
		else if (!it->allowed)
			r->outcome = SLUICE_OUT_LIMITED;
		else
			r->outcome = SLUICE_OUT_SKIPPED;
		r->d.allowed = allowed;
		if (r->outcome == SLUICE_OUT_SKIPPED)
			r->d.allowed = 1; /* would have passed on its own */
	}
}

/* The local store's answer for the rules that fail locally: it answers
 * before its take returns (store.h), while failed() still runs. */
static void on_local(void *arg, int status, int allowed)
{
	struct sluice_take_call_s *call = arg;

	if (status == 0)
		record(call->t, call->first, call->n, allowed, 1);
}

/* The store failed a take: each rule's on_store_error decides.  A
 * fail-closed rule among enforcing ones answers 503 and nothing else is
 * charged; otherwise the rules that fail locally are decided together on
 * the local memory store, through its driver as any store is, and the
 * rest fail open. */
static void failed(sluice_take_t *t, size_t first, size_t n)
{
	struct sluice_take_call_s local;
	size_t k, nlocal = 0;
	int closed = 0;

	for (k = first; k < first + n; k++) {
		const sluice_rule_t *rule = t->matches[t->order[k]].rule;

		t->results[t->order[k]].store_err = 1;
		if (rule->on_store_error == SLUICE_FAIL_CLOSED && !rule->shadow)
			closed = 1;
	}
	for (k = first; k < first + n; k++) {
		const sluice_rule_t *rule = t->matches[t->order[k]].rule;
		sluice_match_result_t *res = &t->results[t->order[k]];

		res->decided = 0;
		if (rule->on_store_error == SLUICE_FAIL_CLOSED && !rule->shadow)
			res->outcome = SLUICE_OUT_ERROR_CLOSED;
		else if (rule->on_store_error == SLUICE_FAIL_LOCAL && closed)
			res->outcome = SLUICE_OUT_SKIPPED;
		else if (rule->on_store_error == SLUICE_FAIL_LOCAL &&
			 t->be->local) {
			/* Move it to the front of the local ones. */
			sluice_take_item_t it = t->items[k];
			size_t o = t->order[k], to = first + nlocal++;

			t->items[k] = t->items[to];
			t->order[k] = t->order[to];
			t->items[to] = it;
			t->order[to] = o;
			res->outcome = SLUICE_OUT_ERROR_OPEN;
		} else
			res->outcome = SLUICE_OUT_ERROR_OPEN;
	}
	if (!nlocal)
		return;
	local.t = t;
	local.first = first;
	local.n = nlocal;
	(void)sluice_memory_store_ops.take(t->be->local, t->items + first,
					   nlocal, t->now_us, on_local, &local);
}

static void on_store(void *arg, int status, int allowed)
{
	struct sluice_take_call_s *call = arg;
	sluice_take_t *t = call->t;

	if (status == 0)
		record(t, call->first, call->n, allowed, 0);
	else
		failed(t, call->first, call->n);
	unref(t);
}

static void issue(sluice_take_t *t, size_t c, size_t first, size_t n)
{
	struct sluice_take_call_s *call = &t->calls[c];
	int r;

	call->t = t;
	call->first = first;
	call->n = n;
	t->pending++;
	r = t->be->ops->take(t->be->impl, t->items + first, n, t->now_us,
			     on_store, call);
	if (r < 0)
		on_store(call, r, 0);
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
	/* The callback runs exactly once per decide. */
	SLUICE_ASSERT(!t->finished);
	t->finished = 1;
	t->cb(t->arg, v);
}

static void set_item(sluice_take_t *t, size_t k, size_t i)
{
	const sluice_match_t *m = &t->matches[i];
	sluice_take_item_t *it = &t->items[k];

	memset(it, 0, sizeof(*it));
	it->key = m->key;
	it->keylen = m->keylen;
	it->limits = m->set->limits;
	it->nlimits = m->set->nlimits;
	it->cost = t->costs[i];
	t->order[k] = i;
}

/* ------------------------------------------------------------- carrying */

static void carried(void *arg, int status, int allowed)
{
	/* A carry that failed leaves the take to decide on what the store
	 * holds; the take that follows says the store's failure itself. */
	(void)arg;
	(void)status;
	(void)allowed;
}

void sluice_verdict_carry(sluice_backend_t *be, const sluice_limit_set_t *set,
			  const void *key, size_t keylen, int64_t now_us)
{
	sluice_limit_t from[SLUICE_MAX_LIMITS][SLUICE_CARRY_MAX];
	sluice_carry_item_t items[SLUICE_MAX_LIMITS];
	size_t l, j, n = 0;

	if (!set || !set->carry || !be->ops->carry)
		return;
	for (l = 0; l < set->nlimits; l++) {
		const sluice_carry_from_t *c = &set->carry[l];
		size_t k = 0;

		/* Past until_us every bucket under the earlier limit is
		 * full: nothing to carry, and no cost to the take. */
		for (j = 0; j < c->n; j++)
			if (c->until_us[j] > now_us)
				from[n][k++] = c->from[j];
		if (!k)
			continue;
		items[n].key = key;
		items[n].keylen = keylen;
		items[n].to = &set->limits[l];
		items[n].from = from[n];
		items[n].nfrom = k;
		n++;
	}
	if (n)
		be->ops->carry(be->impl, items, n, now_us, carried, NULL);
}

void sluice_verdict_decide(sluice_backend_t *be, sluice_take_t *t,
			   int64_t now_us, sluice_verdict_cb cb, void *arg)
{
	size_t i, k = 0, enforcing, c = 0;

	/* A take is decided once at a time: the last verdict is delivered
	 * (or the take is new) before it is reused. */
	SLUICE_ASSERT(t->pending == 0);
	SLUICE_ASSERT(t->nmatches <= t->cap);
	t->be = be;
	t->cb = cb;
	t->arg = arg;
	t->now_us = now_us;
	t->finished = 0;
	memset(t->results, 0, sizeof(t->results[0]) * t->nmatches);
	for (i = 0; i < t->nmatches; i++)
		if (!t->matches[i].rule->shadow)
			set_item(t, k++, i);
	enforcing = k;
	for (i = 0; i < t->nmatches; i++)
		if (t->matches[i].rule->shadow)
			set_item(t, k++, i);

	/* Each key keeps its usage across a changed limit: the store sees
	 * the carry before the take. */
	for (i = 0; i < t->nmatches; i++)
		sluice_verdict_carry(be, t->matches[i].set, t->matches[i].key,
				     t->matches[i].keylen, now_us);
	t->pending = 1; /* held while issuing */
	if (enforcing)
		issue(t, c++, 0, enforcing);
	for (k = enforcing; k < t->nmatches; k++)
		issue(t, c++, k, 1);
	SLUICE_ASSERT(k == t->nmatches);
	unref(t);
}

/* ------------------------------------------------------------ answering */

void sluice_verdict_header_lines(sluice_buf_t *out, const sluice_take_t *t,
				 const sluice_verdict_t *v)
{
	const sluice_match_t *m;
	char name[256];

	if (v->report < 0)
		return;
	m = &t->matches[v->report];
	/* (The verdict reports a shadow rule when only shadow rules
	 * matched, for simulate and replay.) */
	if (m->rule->shadow)
		return;
	sluice_policy_name(m, name, sizeof(name));
	sluice_ratelimit_headers_set(out, name, m->set->limits, m->set->nlimits,
				     v->which, &v->summary, !v->allowed);
}

static void refund_done(void *arg, int status, int allowed)
{
	(void)arg;
	(void)status;
	(void)allowed;
}

void sluice_verdict_refund(sluice_backend_t *be, sluice_take_t *t,
			   int64_t now_us)
{
	size_t k;

	SLUICE_ASSERT(t->finished && t->pending == 0);
	if (!t->verdict.allowed || t->verdict.status)
		return;
	/* Each charged item on its own: the local fallback may have moved
	 * items about inside the enforcing ones. */
	for (k = 0; k < t->nmatches; k++) {
		const sluice_match_result_t *r = &t->results[t->order[k]];

		if (t->matches[t->order[k]].rule->shadow ||
		    r->outcome != SLUICE_OUT_ALLOWED || r->local)
			continue;
		(void)be->ops->refund(be->impl, &t->items[k], 1, now_us,
				      refund_done, NULL);
	}
}
