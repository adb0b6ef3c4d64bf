/*
 * rls.c -- deciding an Envoy RateLimitRequest (see rls.h).
 *
 * Each descriptor is matched against its domain's tree (match.c) and
 * becomes one bucket set; every enforcing one goes to the store in a
 * single all-or-nothing take through the verdict engine (policy/verdict.h), so
 * "one descriptor over the limit charges none of the others" holds on
 * every store; shadow_mode descriptors are charged apart and never make
 * the answer OVER_LIMIT.  Where envoyproxy/ratelimit's fixed windows and
 * our token buckets differ (limit_remaining, duration_until_reset), the
 * answer describes the bucket: whole tokens left, time until full.
 */
#include "policy/envoy/rls.h"
#include "policy/envoy/config.h"
#include "policy/envoy/import.h"
#include "policy/envoy/meta.h"
#include "policy/envoy/metrics.h"
#include "policy/envoy/xds.h"
#include "policy/ratelimit_headers.h"
#include "policy/request.h"
#include "util/buf.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ------------------------------------------------------------ helpers */

static int fail(char *errbuf, size_t errlen, const char *fmt, size_t i)
{
	snprintf(errbuf, errlen, fmt, i);
	return SLUICE_EINVAL;
}

/* Envoy's answer is a uint32. */
static uint32_t u32(uint64_t v)
{
	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static int validate(const sluice_rls_request_t *req, char *errbuf,
		    size_t errlen)
{
	size_t i, j;

	if (!req->domain || !*req->domain)
		return fail(errbuf, errlen,
			    "rate limit domain must not be empty", 0);
	if (req->ndescriptors == 0)
		return fail(errbuf, errlen,
			    "rate limit descriptor list must not be empty", 0);
	if (req->ndescriptors > SLUICE_ENVOY_MAX_DESCRIPTORS) {
		snprintf(errbuf, errlen,
			 "%zu descriptors in one request; at most %d",
			 req->ndescriptors, SLUICE_ENVOY_MAX_DESCRIPTORS);
		return SLUICE_EINVAL;
	}
	for (i = 0; i < req->ndescriptors; i++) {
		const sluice_rls_descriptor_t *d = &req->descriptors[i];

		if (d->nentries > SLUICE_ENVOY_MAX_ENTRIES) {
			snprintf(errbuf, errlen,
				 "descriptor %zu has %zu entries; at most %d",
				 i, d->nentries, SLUICE_ENVOY_MAX_ENTRIES);
			return SLUICE_EINVAL;
		}
		for (j = 0; j < d->nentries; j++)
			if (!d->entries[j].key)
				return fail(errbuf, errlen,
					    "descriptor %zu has an entry "
					    "without a key",
					    i);
		if (d->has_limit && !sluice_envoy_unit_seconds(d->limit_unit))
			return fail(errbuf, errlen,
				    "descriptor %zu: its limit has no valid "
				    "unit",
				    i);
	}
	return 0;
}

/* The limit a descriptor gets: the request's own (RateLimitDescriptor.
 * limit, applied as envoyproxy/ratelimit does whenever the domain is
 * configured, matched or not), else its config match. */
static int classify(rls_ctx_t *x, const sluice_envoy_domain_t *dom, size_t i,
		    char *errbuf, size_t errlen)
{
	const sluice_rls_descriptor_t *rd = &x->req->descriptors[i];
	desc_t *d = &x->d[i];
	sluice_envoy_match_t m;
	char msg[160];

	if (!dom) {
		/* An unknown domain limits nothing; counted per descriptor,
		 * as envoyproxy/ratelimit does, under the domain's own
		 * series (bounded as every series is). */
		sluice_envoy_add(&sluice_envoy_series(x->req->domain, "")
					  ->domain_not_found,
				 1);
		return 0;
	}
	if (rd->has_limit) {
		d->rule = &x->cfg->override_rule;
		d->units[0].requests_per_unit = rd->limit_requests_per_unit;
		d->units[0].unit = rd->limit_unit;
		d->series = sluice_envoy_series(dom->name, "_override");
		d->name = "override";
		d->set = &d->oset;
		d->oset.nlimits = 1;
		if (rd->limit_requests_per_unit == 0) {
			d->kind = D_BLOCKED;
			return 0;
		}
		if ((sluice_envoy_calendar(&x->cfg->settings, dom->name)
			     ? sluice_envoy_quota_make(
				       rd->limit_requests_per_unit,
				       rd->limit_unit, &d->oset.limits[0], msg,
				       sizeof(msg))
			     : sluice_envoy_limit_make(
				       rd->limit_requests_per_unit,
				       rd->limit_unit, 0, &d->oset.limits[0],
				       msg, sizeof(msg))) < 0) {
			snprintf(errbuf, errlen, "descriptor %zu: limit: %s", i,
				 msg);
			return SLUICE_EINVAL;
		}
		d->kind = D_CHARGE;
		return 0;
	}
	sluice_envoy_match(dom, rd->entries, rd->nentries, &m);
	if (!m.node)
		return 0;
	d->limit = m.node->limit;
	d->meta = m.node->metadata;
	d->rule = &d->limit->rule;
	d->set = &d->limit->set;
	d->shadow = m.node->shadow_mode;
	d->quota = m.node->quota_mode && !d->shadow;
	d->name = d->limit->name ? d->limit->name : d->limit->rule.name;
	memcpy(d->units, d->limit->units, sizeof(d->units));
	if (d->limit->unlimited) {
		d->kind = D_UNLIMITED;
		return 0;
	}
	d->series = sluice_envoy_match_series(dom->name, rd->entries,
					      rd->nentries, &m);
	d->kind = d->limit->blocked ? D_BLOCKED : D_CHARGE;
	if (d->kind == D_CHARGE) {
		/* The bucket key needs the match (shared values). */
		sluice_envoy_key(dom->name, rd->entries, rd->nentries, &m,
				 x->t->matches[i].key);
		x->t->matches[i].keylen = strlen(x->t->matches[i].key);
	}
	return 0;
}

/* `replaces`: a limit whose name another matched limit replaces is
 * dropped (OK without current_limit), as envoyproxy/ratelimit does. */
static void apply_replaces(rls_ctx_t *x, size_t n)
{
	size_t i, j, k;

	for (i = 0; i < n; i++) {
		const sluice_envoy_limit_t *l = x->d[i].limit;

		/* An unlimited limit stays unlimited (envoyproxy/ratelimit
		 * drops it before looking at replaces). */
		if (!l || !l->name || x->d[i].kind == D_NONE ||
		    x->d[i].kind == D_UNLIMITED)
			continue;
		for (j = 0; j < n; j++) {
			const sluice_envoy_limit_t *r = x->d[j].limit;

			if (!r || j == i)
				continue;
			for (k = 0; k < r->nreplaces; k++)
				if (strcmp(r->replaces[k], l->name) == 0)
					break;
			if (k < r->nreplaces)
				break;
		}
		if (j < n) {
			x->d[i].kind = D_NONE;
			x->d[i].series = NULL;
		}
	}
}

static void on_verdict(void *arg, const sluice_verdict_t *v);

/* ------------------------------------------------------------ the answer */

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

/* A cost above every capacity can never pass, whatever its size: the
 * store gets capacity + 1 (a client's hits_addend of 2^64 - 1 must not
 * reach a store's arithmetic). */
static uint64_t clamp_cost(uint64_t cost, const sluice_limit_set_t *set)
{
	uint64_t max = 0;
	size_t i;

	for (i = 0; i < set->nlimits; i++)
		if (set->limits[i].capacity > max)
			max = set->limits[i].capacity;
	return cost > max ? max + 1 : cost;
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
	uint64_t hits = d->kind == D_CHARGE ? clamp_cost(d->cost, d->set)
			: d->cost > 1	    ? 1
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
		assert(d->settled || (x->t && d->match < x->t->nmatches));
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

static void finish(rls_ctx_t *x, const sluice_verdict_t *v)
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

/*
 * quota_mode, all or nothing: a request is refused when a normal
 * descriptor is over, or when every quota descriptor is; refused, it
 * charges nothing; allowed, it charges every descriptor but the quota
 * ones that are over (those cannot be).  The store's take is all or
 * nothing over every enforcing descriptor, quota ones included: when it
 * refused only for quota descriptors and some other quota descriptor
 * would pass, those found over are set aside (their answer kept) and the
 * rest is taken again, atomically again -- at most once per quota
 * descriptor.  shadow_mode descriptors were charged apart in the first
 * round and are set aside too.  Returns 1 when a round was started.
 */
static int quota_retake(rls_ctx_t *x, const sluice_verdict_t *v)
{
	sluice_take_t *t = x->t;
	size_t i, k, over = 0, left = 0;

	if (!t || !v || v->allowed || v->status || x->blocked)
		return 0;
	for (i = 0; i < x->req->ndescriptors; i++) {
		const desc_t *d = &x->d[i];
		int limited =
			d->kind == D_CHARGE && !d->settled &&
			t->results[d->match].outcome == SLUICE_OUT_LIMITED;

		if (d->shadow || d->kind == D_NONE)
			continue;
		if (!d->quota && limited)
			return 0; /* a normal descriptor is over */
		if (d->quota && limited)
			over++;
		else if (d->quota && (d->kind == D_UNLIMITED ||
				      (d->kind == D_CHARGE && !d->settled)))
			left++; /* a quota descriptor that is not over */
	}
	if (!over || !left)
		return 0; /* every quota descriptor is over */
	/* Set aside what is decided; compact the rest to the front. */
	for (i = 0, k = 0; i < x->req->ndescriptors; i++) {
		desc_t *d = &x->d[i];

		if (d->kind != D_CHARGE || d->settled)
			continue;
		if (d->shadow || (d->quota && t->results[d->match].outcome ==
						      SLUICE_OUT_LIMITED)) {
			d->settled = 1;
			d->res = t->results[d->match];
			continue;
		}
		/* Compaction writes at or before the slot it reads. */
		assert(k <= d->match);
		if (k != d->match) {
			t->matches[k] = t->matches[d->match];
			t->costs[k] = t->costs[d->match];
		}
		d->match = k++;
	}
	if (k == 0)
		return 0; /* nothing left to charge: the answer stands */
	t->nmatches = k;
	sluice_verdict_decide(&x->svc->backend, t, sluice_now_us(), on_verdict,
			      x);
	return 1;
}

static void on_verdict(void *arg, const sluice_verdict_t *v)
{
	rls_ctx_t *x = arg;

	if (!quota_retake(x, v))
		finish(x, v);
}

/* The take, once envoyproxy/ratelimit's counters are in (when asked). */
static void decide(void *arg)
{
	rls_ctx_t *x = arg;

	sluice_verdict_decide(&x->svc->backend, x->t, sluice_now_us(),
			      on_verdict, x);
}

/* envoy.import_counters: each charged bucket's first touch on this
 * worker reads envoyproxy/ratelimit's counter before the take. */
static void import_then_decide(rls_ctx_t *x)
{
	sluice_envoy_import_item_t *items;
	size_t i, k = 0;

	if (!(items = calloc(x->req->ndescriptors, sizeof(*items)))) {
		decide(x); /* out of memory: no import, the take goes on */
		return;
	}
	for (i = 0; i < x->req->ndescriptors; i++) {
		const desc_t *d = &x->d[i];

		if (d->kind != D_CHARGE)
			continue;
		items[k].desc = i;
		items[k].key = x->t->matches[d->match].key;
		items[k].keylen = x->t->matches[d->match].keylen;
		items[k].set = d->set;
		items[k].units = d->units;
		items[k].configured = d->limit != NULL;
		k++;
	}
	sluice_envoy_import(&x->svc->backend, x->cfg, x->req, items, k, decide,
			    x);
	free(items);
}

/* -------------------------------------------------------------- public */

int sluice_rls_decide(struct sluice_svc_s *svc, const sluice_rls_request_t *req,
		      sluice_rls_cb cb, void *arg, char *errbuf, size_t errlen)
{
	const sluice_envoy_config_t *cfg =
		svc->live && svc->live->cfg ? svc->live->cfg->envoy : NULL;
	const sluice_envoy_domain_t *dom;
	rls_ctx_t *x;
	size_t i, k, n, nquota = 0, quota_blocked = 0;
	int rc, blocked = 0;

	if ((rc = validate(req, errbuf, errlen)) < 0) {
		sluice_envoy_count_service(SLUICE_ENVOY_SERVICE_ERROR);
		return rc;
	}
	if (!cfg) {
		snprintf(errbuf, errlen,
			 "no rate limit configuration loaded (the config has "
			 "no envoy: section)");
		return SLUICE_EINVAL;
	}
	n = req->ndescriptors;
	/* The thread's take when it is free, as HTTP's requests borrow it. */
	if (!(x = calloc(1, sizeof(*x))) ||
	    !(x->d = calloc(n, sizeof(*x->d))) ||
	    !(x->t = sluice_take_get(svc)) ||
	    sluice_take_reserve(x->t, n) < 0) {
		if (x) {
			if (x->t)
				sluice_take_put(svc, x->t);
			free(x->d);
		}
		free(x);
		snprintf(errbuf, errlen, "out of memory");
		return SLUICE_ENOMEM;
	}
	x->svc = svc;
	x->cfg = cfg;
	x->req = req;
	x->cb = cb;
	x->arg = arg;
	dom = sluice_envoy_domain(cfg, req->domain);
	for (i = 0; i < n; i++)
		if ((rc = classify(x, dom, i, errbuf, errlen)) < 0) {
			sluice_take_put(svc, x->t);
			free(x->d);
			free(x);
			return rc;
		}
	apply_replaces(x, n);
	/* Costs; a blocked (requests_per_unit 0) enforcing descriptor makes
	 * the request over without the store: the others are then only
	 * looked at (cost 0), so nothing is charged. */
	for (i = 0; i < n; i++) {
		const sluice_rls_descriptor_t *rd = &req->descriptors[i];

		x->d[i].cost = rd->has_hits_addend ? rd->hits_addend
			       : req->hits_addend  ? req->hits_addend
						   : 1;
		if (x->d[i].kind == D_BLOCKED && !x->d[i].shadow &&
		    !x->d[i].quota)
			blocked = 1;
		if (x->d[i].quota && x->d[i].kind != D_NONE) {
			nquota++;
			quota_blocked += x->d[i].kind == D_BLOCKED;
		}
	}
	/* Every quota descriptor always over: over as a blocked one. */
	if (nquota && quota_blocked == nquota)
		blocked = 1;
	x->blocked = blocked;
	/* The take: matches[i] was filled by classify() for config
	 * matches (its key); compact the charged ones to the front. */
	for (i = 0, k = 0; i < n; i++) {
		desc_t *d = &x->d[i];
		sluice_match_t *m = &x->t->matches[k];
		const sluice_rls_descriptor_t *rd = &req->descriptors[i];

		if (d->kind != D_CHARGE)
			continue;
		/* Compaction writes at or before the slot it reads. */
		assert(k <= i);
		if (d->limit) {
			if (k != i)
				memcpy(m->key, x->t->matches[i].key,
				       x->t->matches[i].keylen + 1);
			m->keylen = strlen(m->key);
		} else {
			/* The descriptor's own limit: a caller-chosen rate,
			 * kept among the ad-hoc buckets so that a flood of
			 * slow overrides evicts no configured bucket. */
			char own[SLUICE_KEY_MAX];

			sluice_envoy_key(req->domain, rd->entries, rd->nentries,
					 NULL, own);
			sluice_adhoc_key(own, strlen(own), m);
		}
		m->rule = d->rule;
		m->set = d->set;
		x->t->costs[k] = blocked && !m->rule->shadow
					 ? 0
					 : clamp_cost(d->cost, d->set);
		d->charge = x->t->costs[k];
		d->match = k++;
	}
	x->t->nmatches = k;
	x->live = svc->live;
	sluice_live_ref(x->live);
	if (k == 0) {
		sluice_take_put(svc, x->t);
		x->t = NULL;
		finish(x, NULL);
		return 0;
	}
	if (cfg->settings.import_counters)
		import_then_decide(x);
	else
		decide(x);
	return 0;
}

void sluice_rls_response_free(sluice_rls_response_t *resp)
{
	size_t i;

	if (!resp)
		return;
	for (i = 0; i < resp->nstatuses; i++)
		free(resp->statuses[i].limit_name);
	free(resp->statuses);
	for (i = 0; i < resp->nheaders; i++) {
		free(resp->headers[i].key);
		free(resp->headers[i].value);
	}
	free(resp->headers);
	sluice_meta_free(resp->dynamic_metadata);
	free(resp);
}

int sluice_rls_healthy(struct sluice_svc_s *svc)
{
	return !svc->draining && sluice_backend_healthy(&svc->backend) &&
	       !sluice_envoy_xds_pending();
}
