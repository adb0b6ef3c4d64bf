/*
 * rls_answer.c -- the answer to an Envoy RateLimitRequest once the take
 * decided it (see rls.c): a status per descriptor that describes its
 * bucket, envoyproxy/ratelimit's headers or the IETF fields for the one
 * nearest its limit, the dynamic metadata, and the descriptor series'
 * counts.
 */
#include "policy/envoy/meta.h"
#include "policy/envoy/metrics.h"
#include "policy/envoy/rls_internal.h"
#include "policy/ratelimit_headers.h"
#include "util/buf.h"
#include "util/invariant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Envoy's answer is a uint32. */
static uint32_t u32(uint64_t v)
{
	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

uint64_t sluice_rls__clamp_cost(uint64_t cost, const sluice_limit_set_t *set)
{
	uint64_t max = 0;
	size_t i;

	for (i = 0; i < set->nlimits; i++)
		if (set->limits[i].capacity > max)
			max = set->limits[i].capacity;
	return cost > max ? max + 1 : cost;
}

static void add_header(sluice_rls_response_t *r, const char *k, const char *v)
{
	sluice_rls_header_t *h = &r->headers[r->nheaders];

	if (!(h->key = strdup(k)) || !(h->value = strdup(v))) {
		free(h->key);
		h->key = NULL;
		return;
	}
	r->nheaders++;
}

/* The policy name of the IETF fields: the limit's own `name` (else
 * "default"), so that a client is not shown the config's keys and
 * values, unless the operator asked for the descriptor's path. */
static const char *policy_name(const rls_ctx_t *x, const desc_t *d)
{
	if (x->cfg->settings.ietf_policy_path || !d->limit)
		return d->name; /* a request's own limit: "override" */
	return d->limit->name ? d->limit->name : "default";
}

/* draft-ietf-httpapi-ratelimit-headers-11's RateLimit-Policy and
 * RateLimit for the descriptor d, whose status is st. */
static void add_ietf(rls_ctx_t *x, sluice_rls_response_t *r, const desc_t *d,
		     const sluice_rls_status_t *st, uint64_t reset_s)
{
	sluice_buf_t b = {0};
	uint64_t window = sluice_envoy_unit_seconds(st->unit);
	size_t i;

	if (d->kind == D_CHARGE) {
		size_t which = 0;

		for (i = 0; i < d->set->nlimits; i++)
			if (d->units[i].requests_per_unit ==
				    st->requests_per_unit &&
			    d->units[i].unit == st->unit)
				which = i;
		window = sluice_limit_window_s(&d->set->limits[which]);
	}
	sluice_sf_string(&b, policy_name(x, d));
	sluice_buf_printf(&b, ";q=%u;w=%llu", st->requests_per_unit,
			  (unsigned long long)window);
	sluice_buf_append(&b, "", 1);
	if (!b.oom)
		add_header(r, "RateLimit-Policy", b.data);
	b.len = 0;
	sluice_sf_string(&b, policy_name(x, d));
	sluice_buf_printf(&b, ";r=%u;t=%llu", st->limit_remaining,
			  (unsigned long long)reset_s);
	sluice_buf_append(&b, "", 1);
	if (!b.oom)
		add_header(r, "RateLimit", b.data);
	sluice_buf_free(&b);
}

/* For the descriptor nearest its limit (or the one over it):
 * envoyproxy/ratelimit's three headers (response_headers), and the IETF
 * fields (ietf_headers), each a choice of its own. */
static void add_headers(rls_ctx_t *x, sluice_rls_response_t *r)
{
	const sluice_envoy_settings_t *s = &x->cfg->settings;
	const sluice_rls_status_t *st;
	char num[32];
	uint64_t reset_s;
	size_t i, best = SIZE_MAX;

	for (i = 0; i < r->nstatuses; i++) {
		st = &r->statuses[i];
		if (!st->has_limit)
			continue;
		if (st->code == SLUICE_RLS_CODE_OVER_LIMIT ||
		    best == SIZE_MAX ||
		    (r->statuses[best].code != SLUICE_RLS_CODE_OVER_LIMIT &&
		     st->limit_remaining < r->statuses[best].limit_remaining))
			best = i;
	}
	if (best == SIZE_MAX || !(r->headers = calloc(5, sizeof(*r->headers))))
		return;
	st = &r->statuses[best];
	reset_s = (st->duration_until_reset_ms + 999) / 1000;
	if (s->response_headers) {
		snprintf(num, sizeof(num), "%u", st->requests_per_unit);
		add_header(r, s->header_limit, num);
		snprintf(num, sizeof(num), "%u", st->limit_remaining);
		add_header(r, s->header_remaining, num);
		snprintf(num, sizeof(num), "%llu", (unsigned long long)reset_s);
		add_header(r, s->header_reset, num);
	}
	if (s->ietf_headers)
		add_ietf(x, r, &x->d[best], st, reset_s);
}

/* Counts one descriptor's hits in its series: its cost as the store
 * sees it (clamped to capacity + 1; a blocked limit's capacity is 0), so
 * a client's hits_addend cannot run a counter up to its end in a few
 * requests. */
static void count(const rls_ctx_t *x, const desc_t *d, int over,
		  const sluice_decision_t *dec)
{
	sluice_envoy_series_t *s = d->series;
	unsigned near = x->cfg->settings.near_limit_percent;
	uint64_t hits = d->kind == D_CHARGE
				? sluice_rls__clamp_cost(d->cost, d->set)
			: d->cost > 1 ? 1
				      : d->cost;

	if (!s)
		return;
	sluice_envoy_add(&s->total_hits, hits);
	if (over) {
		sluice_envoy_add(&s->over_limit, hits);
		if (d->shadow)
			sluice_envoy_add(&s->shadow_mode, hits);
	} else {
		sluice_envoy_add(&s->within_limit, hits);
		if (dec && dec->limit &&
		    (dec->limit - dec->remaining) * 100 > dec->limit * near)
			sluice_envoy_add(&s->near_limit, hits);
	}
}

/* A descriptor that would have passed but was not charged (another one
 * refused the request): the take reports the bucket as if charged, so
 * give the cost back to what is reported -- exactly, since the cost is
 * whole tokens. */
static void uncharged(sluice_rls_status_t *st, const sluice_limit_t *limit,
		      uint64_t cost, const sluice_decision_t *dec)
{
	uint64_t per = limit->rate.per ? limit->rate.per : 1;
	uint64_t back_us = cost * limit->rate.interval / per;
	uint64_t reset = dec->reset_after_us > back_us
				 ? dec->reset_after_us - back_us
				 : 0;

	/* A quota's window ends when it ends, but is unused without this
	 * cost when the cost was all it held. */
	if (sluice_limit_is_quota(limit))
		reset = dec->remaining + cost >= limit->capacity
				? 0
				: dec->reset_after_us;

	st->limit_remaining = u32(dec->remaining + cost > limit->capacity
					  ? limit->capacity
					  : dec->remaining + cost);
	st->duration_until_reset_ms = (reset + 999) / 1000;
}

static void status_of(rls_ctx_t *x, size_t i, sluice_rls_status_t *st)
{
	const desc_t *d = &x->d[i];
	const sluice_match_result_t *res;
	size_t which;
	int over;

	st->code = SLUICE_RLS_CODE_OK;
	switch (d->kind) {
	case D_NONE:
		return;
	case D_UNLIMITED:
		st->limit_remaining = UINT32_MAX;
		return;
	case D_BLOCKED:
		st->has_limit = 1;
		st->requests_per_unit = 0;
		st->unit = d->units[0].unit;
		st->duration_until_reset_ms =
			sluice_envoy_unit_seconds(st->unit) * 1000;
		count(x, d, 1, NULL);
		st->code = d->shadow ? SLUICE_RLS_CODE_OK
				     : SLUICE_RLS_CODE_OVER_LIMIT;
		break;
	case D_CHARGE:
		SLUICE_ASSERT(d->settled ||
			      (x->t && d->match < x->t->nmatches));
		res = d->settled ? &d->res : &x->t->results[d->match];
		if (!res->decided) {
			/* The store failed and the rule failed open: no
			 * decision to report. */
			return;
		}
		which = res->which < d->set->nlimits ? res->which : 0;
		over = res->outcome == SLUICE_OUT_LIMITED;
		st->has_limit = 1;
		st->requests_per_unit = d->units[which].requests_per_unit;
		st->unit = d->units[which].unit;
		st->limit_remaining = u32(res->d.remaining);
		st->duration_until_reset_ms =
			(res->d.reset_after_us + 999) / 1000;
		if (res->outcome == SLUICE_OUT_SKIPPED)
			uncharged(st, &d->set->limits[which], d->charge,
				  &res->d);
		count(x, d, over, &res->d);
		if (over && !d->shadow)
			st->code = SLUICE_RLS_CODE_OVER_LIMIT;
		break;
	}
	if (d->name && d->limit && d->limit->name)
		st->limit_name = strdup(d->limit->name);
	st->config_metadata = d->meta;
}

/* The metrics slot Envoy's store failures count in
 * (sluice_store_errors_total{rule="envoy"}), found once. */
static uint16_t envoy_slot(void)
{
	static _Atomic int slot = -1;
	int s = atomic_load_explicit(&slot, memory_order_relaxed);

	if (s < 0) {
		s = sluice_metrics_slot("envoy");
		atomic_store_explicit(&slot, s, memory_order_relaxed);
	}
	return (uint16_t)s;
}

/* Each descriptor the store failed on, whatever on_store_error made of
 * it, is a store error, as a rule's is on the HTTP side. */
static void count_store_errors(const rls_ctx_t *x)
{
	size_t i, n = 0;

	for (i = 0; i < x->req->ndescriptors; i++) {
		const desc_t *d = &x->d[i];

		if (d->kind == D_CHARGE &&
		    (d->settled ? d->res.store_err
				: x->t && x->t->results[d->match].store_err))
			n++;
	}
	if (n && x->svc->metrics)
		sluice_count(&x->svc->metrics->store_errors[envoy_slot()], n);
	if (n)
		sluice_envoy_count_service(SLUICE_ENVOY_STORE_ERROR);
}

void sluice_rls__finish(rls_ctx_t *x, const sluice_verdict_t *v)
{
	const sluice_rls_request_t *req = x->req;
	sluice_rls_response_t *r = calloc(1, sizeof(*r));
	size_t i, nquota = 0, quota_over = 0;

	count_store_errors(x);
	if (!r)
		goto out; /* nothing to answer with: cb cannot run */
	r->overall_code = SLUICE_RLS_CODE_OK;
	if (v && v->status) {
		r->status = v->status;
		r->error = "the rate-limit store failed (envoy.on_store_error "
			   "is closed)";
		goto answer;
	}
	r->statuses = calloc(req->ndescriptors, sizeof(*r->statuses));
	if (!r->statuses) {
		r->status = SLUICE_ENOMEM;
		r->error = "out of memory";
		goto answer;
	}
	r->nstatuses = req->ndescriptors;
	for (i = 0; i < req->ndescriptors; i++) {
		int over;

		status_of(x, i, &r->statuses[i]);
		over = r->statuses[i].code == SLUICE_RLS_CODE_OVER_LIMIT;
		if (x->d[i].quota && x->d[i].kind != D_NONE) {
			nquota++;
			quota_over += over;
		} else if (over) {
			r->overall_code = SLUICE_RLS_CODE_OVER_LIMIT;
		}
	}
	/* quota_mode (as envoyproxy/ratelimit): over when every quota
	 * descriptor is. */
	if (nquota && quota_over == nquota)
		r->overall_code = SLUICE_RLS_CODE_OVER_LIMIT;
	if (x->cfg->settings.response_headers || x->cfg->settings.ietf_headers)
		add_headers(x, r);
	if (x->cfg->settings.dynamic_metadata &&
	    !(r->dynamic_metadata = sluice_meta_response(req, r->statuses)))
		r->status = SLUICE_ENOMEM;
	/* SHADOW_MODE: statuses say what was decided, the answer is OK. */
	if (x->cfg->settings.shadow_mode &&
	    r->overall_code == SLUICE_RLS_CODE_OVER_LIMIT) {
		r->overall_code = SLUICE_RLS_CODE_OK;
		sluice_envoy_count_service(SLUICE_ENVOY_GLOBAL_SHADOW_MODE);
	}
answer:
	x->cb(x->arg, r);
out:
	if (x->t)
		sluice_take_put(x->svc, x->t);
	sluice_live_unref(x->live);
	free(x->d);
	free(x);
}
