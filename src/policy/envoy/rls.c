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
 * answer describes the bucket: whole tokens left, time until full
 * (rls_answer.c builds it).
 */
#include "policy/envoy/rls.h"
#include "policy/envoy/import.h"
#include "policy/envoy/meta.h"
#include "policy/envoy/metrics.h"
#include "policy/envoy/rls_internal.h"
#include "policy/envoy/xds.h"
#include "util/invariant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ helpers */

static int fail(char *errbuf, size_t errlen, const char *fmt, size_t i)
{
	snprintf(errbuf, errlen, fmt, i);
	return SLUICE_EINVAL;
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

/* ------------------------------------------------------------ the take */

static void on_verdict(void *arg, const sluice_verdict_t *v);

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
		SLUICE_ASSERT(k <= d->match);
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
		sluice_rls__finish(x, v);
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

/* The request's context, with the thread's take when it is free (as
 * HTTP's requests borrow it) room for n descriptors; NULL when out of
 * memory. */
static rls_ctx_t *ctx_new(sluice_svc_t *svc, size_t n)
{
	rls_ctx_t *x;

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
		return NULL;
	}
	x->svc = svc;
	return x;
}

/* Each descriptor's cost; 1 when a blocked (requests_per_unit 0)
 * enforcing descriptor, or every quota one being blocked, makes the
 * request over without the store: the others are then only looked at
 * (cost 0), so nothing is charged. */
static int set_costs(rls_ctx_t *x, size_t n)
{
	const sluice_rls_request_t *req = x->req;
	size_t i, nquota = 0, quota_blocked = 0;
	int blocked = 0;

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
	return blocked;
}

/* The take: matches[i] was filled by classify() for config matches (its
 * key); the charged ones are compacted to the front, each with its
 * bucket set and cost.  Returns how many there are. */
static size_t fill_take(rls_ctx_t *x, size_t n)
{
	const sluice_rls_request_t *req = x->req;
	size_t i, k;

	for (i = 0, k = 0; i < n; i++) {
		desc_t *d = &x->d[i];
		sluice_match_t *m = &x->t->matches[k];
		const sluice_rls_descriptor_t *rd = &req->descriptors[i];

		if (d->kind != D_CHARGE)
			continue;
		/* Compaction writes at or before the slot it reads. */
		SLUICE_ASSERT(k <= i);
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
		x->t->costs[k] =
			x->blocked && !m->rule->shadow
				? 0
				: sluice_rls__clamp_cost(d->cost, d->set);
		d->charge = x->t->costs[k];
		d->match = k++;
	}
	x->t->nmatches = k;
	return k;
}

int sluice_rls_decide(struct sluice_svc_s *svc, const sluice_rls_request_t *req,
		      sluice_rls_cb cb, void *arg, char *errbuf, size_t errlen)
{
	const sluice_envoy_config_t *cfg =
		svc->live && svc->live->cfg ? svc->live->cfg->envoy : NULL;
	const sluice_envoy_domain_t *dom;
	rls_ctx_t *x;
	size_t i, n;
	int rc;

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
	if (!(x = ctx_new(svc, n))) {
		snprintf(errbuf, errlen, "out of memory");
		return SLUICE_ENOMEM;
	}
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
	x->blocked = set_costs(x, n);
	x->live = svc->live;
	sluice_live_ref(x->live);
	if (fill_take(x, n) == 0) {
		sluice_take_put(svc, x->t);
		x->t = NULL;
		sluice_rls__finish(x, NULL);
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
