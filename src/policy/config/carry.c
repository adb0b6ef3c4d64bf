/*
 * carry.c -- what a reload hands the new config so that every key
 * keeps its usage when a limit changed.
 *
 * A bucket is named by its key and its limit, so a rule, tier, override or
 * Envoy descriptor whose capacity or rate changed names new buckets, and
 * without more each key would start full.  At a reload the new config is
 * compared with the running one, and each of its limits learns the limits
 * a key's bucket may have been charged under instead (sluice_carry_from_t);
 * the verdict engine hands them to the store's carry verb before the take,
 * and the store moves the usage over (what was used stays used).
 *
 * Which earlier limit a limit takes over: the one at the same place in the
 * same-named set of the same-named rule -- the rule's limits, the tier of
 * the same name (the default tier, or the plain limits, when the running
 * rule had no such tier), the override of the same identity (the rule's
 * default when the identity had none); an identity whose override went
 * away takes over from that override at the rule's default.  Envoy
 * descriptors are matched by their path (domain, keys and values).
 * Earlier limits of the running config come along (a key untouched over
 * several reloads), each kept until any bucket under it would be full
 * again: its time to refill after the reload that replaced it (a
 * quota's: until every window open then is over), at least
 * SLUICE_CARRY_KEEP_MIN_US, so that penalties and blocks of up to a day
 * and instances reloading a little later are carried too.  After that no
 * take pays for the carry.  A limit still in use by the rule's limits or
 * tiers is never an earlier limit (its buckets are live, not history).
 */
#include "policy/config/config.h"
#include "policy/envoy/config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The shortest time an earlier limit is kept after a reload. */
#define SLUICE_CARRY_KEEP_MIN_US (INT64_C(86400) * 1000000)

/* 1 when l is among the limits of r's plain limits or tiers. */
static int live_in_rule(const sluice_rule_t *r, const sluice_limit_t *l)
{
	size_t t, i, nsets = r->ntiers ? r->ntiers : 1;

	for (t = 0; t < nsets; t++) {
		const sluice_limit_set_t *s =
			r->ntiers ? &r->tiers[t] : &r->limits;

		for (i = 0; i < s->nlimits; i++)
			if (sluice_limit_same(&s->limits[i], l))
				return 1;
	}
	return 0;
}

/* Appends `from` (until until_us) to the earlier limits of set->limits[i]
 * unless it is that limit, live in the rule, already there, or the list
 * is full.  -1 when out of memory. */
static int add_from(sluice_limit_set_t *set, size_t i,
		    const sluice_rule_t *rule, const sluice_limit_t *from,
		    int64_t until_us)
{
	sluice_carry_from_t *c;
	size_t j;

	if (sluice_limit_same(from, &set->limits[i]) ||
	    (rule && live_in_rule(rule, from)))
		return 0;
	if (!set->carry &&
	    !(set->carry = calloc(SLUICE_MAX_LIMITS, sizeof(*set->carry))))
		return -1;
	c = &set->carry[i];
	for (j = 0; j < c->n; j++)
		if (sluice_limit_same(&c->from[j], from)) {
			if (c->until_us[j] < until_us)
				c->until_us[j] = until_us;
			return 0;
		}
	if (c->n == SLUICE_CARRY_MAX)
		return 0;
	c->from[c->n] = *from;
	c->until_us[c->n++] = until_us;
	return 0;
}

/* The longest window of a quota's unit, in seconds (a day of 25 hours
 * when a zone's clocks go back, a month of 31 days, a leap year). */
static uint64_t quota_unit_max_s(uint8_t per)
{
	static const uint64_t s[] = {0,		 1,	     60,
				     3600,	 90000,	     7 * 86400 + 3600,
				     31 * 86400, 366 * 86400};

	return per < sizeof(s) / sizeof(s[0]) ? s[per] : 366 * 86400;
}

/* When any bucket under l, last charged at now_us, is full again (at
 * least SLUICE_CARRY_KEEP_MIN_US on); for a quota, when any window open
 * at now_us is over. */
static int64_t keep_until(const sluice_limit_t *l, int64_t now_us)
{
	uint64_t us = sluice_limit_is_quota(l)
			      ? (quota_unit_max_s(l->window.per) + 1) * 1000000
			      : l->tau / l->rate.per + 1;

	if (us < (uint64_t)SLUICE_CARRY_KEEP_MIN_US)
		us = (uint64_t)SLUICE_CARRY_KEEP_MIN_US;
	return now_us + (int64_t)us;
}

/* Set `set` (of new rule `rule`, NULL for an Envoy descriptor) takes over
 * from `old` (a set of the running config): position by position, old's
 * limit and the earlier limits old still keeps. */
static int take_over(sluice_limit_set_t *set, const sluice_rule_t *rule,
		     const sluice_limit_set_t *old, int64_t now_us)
{
	size_t i, j;

	for (i = 0; i < set->nlimits && i < old->nlimits; i++) {
		if (add_from(set, i, rule, &old->limits[i],
			     keep_until(&old->limits[i], now_us)) < 0)
			return -1;
		if (!old->carry)
			continue;
		for (j = 0; j < old->carry[i].n; j++)
			if (old->carry[i].until_us[j] > now_us &&
			    add_from(set, i, rule, &old->carry[i].from[j],
				     old->carry[i].until_us[j]) < 0)
				return -1;
	}
	return 0;
}

static const sluice_limit_set_t *override_of(const sluice_rule_t *r,
					     const sluice_override_t *e)
{
	const void *buf = e->key;
	size_t len = e->len;

	return sluice_rule_override(r, &buf, &len, 1);
}

static int rule_carry(sluice_rule_t *r, const sluice_rule_t *old,
		      int64_t now_us)
{
	size_t i;

	if (r->ntiers == 0) {
		if (take_over(&r->limits, r, sluice_rule_tier(old, NULL, 0),
			      now_us) < 0)
			return -1;
	}
	for (i = 0; i < r->ntiers; i++) {
		const char *name = r->tiers[i].name;

		if (take_over(&r->tiers[i], r,
			      sluice_rule_tier(old, name, strlen(name)),
			      now_us) < 0)
			return -1;
	}
	if (r->overrides)
		for (i = 0; i < r->overrides->n; i++) {
			const sluice_override_t *e = &r->overrides->entries[i];
			const sluice_limit_set_t *was = override_of(old, e);

			if (!was)
				was = sluice_rule_tier(old, NULL, 0);
			/* An override's limits are its identity's own: one
			 * still used by the tiers is history for it too. */
			if (take_over(&r->overrides->sets[e->set], NULL, was,
				      now_us) < 0)
				return -1;
		}
	/* An identity whose override went away is at the default now. */
	if (old->overrides)
		for (i = 0; i < old->overrides->n; i++) {
			const sluice_override_t *e =
				&old->overrides->entries[i];
			sluice_limit_set_t *dflt;

			if (override_of(r, e))
				continue;
			dflt = r->ntiers ? &r->tiers[r->default_tier]
					 : &r->limits;
			if (take_over(dflt, r, &old->overrides->sets[e->set],
				      now_us) < 0)
				return -1;
		}
	return 0;
}

static const sluice_rule_t *rule_named(const sluice_config_t *cfg,
				       const char *name)
{
	size_t i;

	for (i = 0; i < cfg->nrules; i++)
		if (strcmp(cfg->rules[i].name, name) == 0)
			return &cfg->rules[i];
	return NULL;
}

/* ---------------------------------------------------------------- envoy */

/* Every descriptor limit of an Envoy config, by its path. */
typedef struct {
	const sluice_envoy_limit_t **v;
	size_t n, cap;
} limits_t;

static int by_name(const void *a, const void *b)
{
	const sluice_envoy_limit_t *x = *(const sluice_envoy_limit_t *const *)a,
				   *y = *(const sluice_envoy_limit_t *const *)b;

	return strcmp(x->rule.name, y->rule.name);
}

static int collect(limits_t *out, const sluice_envoy_node_t *nodes, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (nodes[i].limit && nodes[i].limit->rule.name) {
			if (out->n == out->cap) {
				size_t cap = out->cap ? out->cap * 2 : 64;
				const sluice_envoy_limit_t **v =
					realloc(out->v, cap * sizeof(*v));

				if (!v)
					return -1;
				out->v = v;
				out->cap = cap;
			}
			out->v[out->n++] = nodes[i].limit;
		}
		if (collect(out, nodes[i].children, nodes[i].nchildren) < 0)
			return -1;
	}
	return 0;
}

static int envoy_limits(limits_t *out, const sluice_envoy_config_t *e)
{
	size_t i;

	memset(out, 0, sizeof(*out));
	for (i = 0; e && i < e->ndomains; i++)
		if (collect(out, e->domains[i].children,
			    e->domains[i].nchildren) < 0)
			return -1;
	if (out->n > 1)
		qsort(out->v, out->n, sizeof(*out->v), by_name);
	return 0;
}

static int envoy_carry(sluice_envoy_config_t *e,
		       const sluice_envoy_config_t *old, int64_t now_us)
{
	limits_t nl, ol;
	size_t i;
	int rc = 0;

	if (!e || !old)
		return 0;
	if (envoy_limits(&nl, e) < 0 || envoy_limits(&ol, old) < 0) {
		free(nl.v);
		return -1;
	}
	for (i = 0; i < nl.n && rc == 0; i++) {
		const sluice_envoy_limit_t *key = nl.v[i], **was;

		/* (bsearch() must not be given the NULL of no limits) */
		was = ol.n ? bsearch(&key, ol.v, ol.n, sizeof(*ol.v), by_name)
			   : NULL;
		if (was)
			/* The node is the config's own: its limit's set is
			 * ours to fill. */
			rc = take_over((sluice_limit_set_t *)&key->set, NULL,
				       &(*was)->set, now_us);
	}
	free(nl.v);
	free(ol.v);
	return rc;
}

/* ---------------------------------------------------------------------- */

int sluice_config_carry(sluice_config_t *cfg, const sluice_config_t *prev,
			int64_t now_us)
{
	size_t i;

	if (!prev)
		return 0;
	for (i = 0; i < cfg->nrules; i++) {
		const sluice_rule_t *old = rule_named(prev, cfg->rules[i].name);

		if (old && rule_carry(&cfg->rules[i], old, now_us) < 0)
			return SLUICE_ENOMEM;
	}
	if (envoy_carry(cfg->envoy, prev->envoy, now_us) < 0)
		return SLUICE_ENOMEM;
	return 0;
}
