/*
 * carry.c -- a policy that replaces one of the same name keeps each key's
 * usage.
 *
 * A Node policy names its buckets by its name and its limits, as a
 * `sluice serve` rule does, so `policy([...], {name: 'api'})` made again
 * with another capacity or rate would find every key full.  The addon
 * keeps, per name, the limits the last policy of that name had (a
 * process-wide registry: policies are made on any thread that loads the
 * addon); a new policy of the name learns them as its earlier limits,
 * position by position, with the earlier limits the replaced one still
 * kept, each until a bucket under it would be full again (a quota:
 * until its window ended), at least a day.  Before each call on a key,
 * the store's carry verb moves the key's usage from them (what was
 * used stays used: sluice_carry(); a bucket's shortfall becomes a quota's
 * count and back, sluice_quota.h).  Policies of one name used side by
 * side (the old one still held by a middleware) are history of each
 * other only in the order they were made.
 */
#include "addon.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define KEEP_MIN_US (INT64_C(86400) * 1000000)
#define NAMES_MAX   4096 /* names remembered; later ones carry nothing */

typedef struct seen_s {
	char name[SLUICE_KEY_NAME_MAX + 1];
	size_t nlimits;
	sluice_limit_t limits[SLUICE_MAX_LIMITS];
	addon_carry_t carry[SLUICE_MAX_LIMITS];
} seen_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static seen_t *seen;
static size_t nseen, capseen;

static void add_from(addon_carry_t *c, const sluice_limit_t *to,
		     const sluice_limit_t *from, int64_t until)
{
	size_t j;

	if (sluice_limit_same(from, to))
		return;
	for (j = 0; j < c->n; j++)
		if (sluice_limit_same(&c->from[j], from)) {
			if (c->until_us[j] < until)
				c->until_us[j] = until;
			return;
		}
	if (c->n < ADDON_CARRY_MAX) {
		c->from[c->n] = *from;
		c->until_us[c->n++] = until;
	}
}

static int64_t keep_until(const sluice_limit_t *l, int64_t now)
{
	uint64_t us;

	/* A quota: until a window opening now would end (a count never
	 * lives longer: its state expires with its window). */
	if (sluice_limit_is_quota(l)) {
		int64_t end = sluice_quota_window(l, 0, now, NULL);

		us = end > now ? (uint64_t)(end - now) + 1000000 : 0;
	} else {
		us = l->tau / l->rate.per + 1;
	}

	return now + (int64_t)(us < (uint64_t)KEEP_MIN_US
				       ? (uint64_t)KEEP_MIN_US
				       : us);
}

void addon_policy_learn(policy_t *p, int64_t now)
{
	seen_t *s = NULL;
	size_t i, j;

	pthread_mutex_lock(&lock);
	for (i = 0; i < nseen; i++)
		if (strcmp(seen[i].name, p->name) == 0) {
			s = &seen[i];
			break;
		}
	if (s) {
		for (i = 0; i < p->nlimits && i < s->nlimits; i++) {
			add_from(&p->carry[i], &p->limits[i], &s->limits[i],
				 keep_until(&s->limits[i], now));
			for (j = 0; j < s->carry[i].n; j++)
				if (s->carry[i].until_us[j] > now)
					add_from(&p->carry[i], &p->limits[i],
						 &s->carry[i].from[j],
						 s->carry[i].until_us[j]);
		}
	} else if (nseen < NAMES_MAX) {
		if (nseen == capseen) {
			size_t cap = capseen ? capseen * 2 : 16;
			seen_t *v = realloc(seen, cap * sizeof(*v));

			if (v) {
				seen = v;
				capseen = cap;
			}
		}
		if (nseen < capseen) {
			s = &seen[nseen++];
			memset(s, 0, sizeof(*s));
			memcpy(s->name, p->name, sizeof(s->name));
		}
	}
	if (s) {
		s->nlimits = p->nlimits;
		memcpy(s->limits, p->limits, sizeof(s->limits));
		memcpy(s->carry, p->carry, sizeof(s->carry));
	}
	pthread_mutex_unlock(&lock);
	for (i = 0; i < p->nlimits; i++)
		p->carries |= p->carry[i].n > 0;
}

static void carried(void *arg, int status, int allowed)
{
	/* The call that follows says a failing store itself. */
	(void)arg;
	(void)status;
	(void)allowed;
}

void addon_carry(sluice_backend_t *be, const policy_t *p, const void *key,
		 size_t keylen, int64_t now)
{
	sluice_limit_t from[SLUICE_MAX_LIMITS][ADDON_CARRY_MAX];
	sluice_carry_item_t items[SLUICE_MAX_LIMITS];
	size_t i, j, n = 0;

	if (!p->carries || !be->ops->carry)
		return;
	for (i = 0; i < p->nlimits; i++) {
		size_t k = 0;

		for (j = 0; j < p->carry[i].n; j++)
			if (p->carry[i].until_us[j] > now)
				from[n][k++] = p->carry[i].from[j];
		if (!k)
			continue;
		items[n].key = key;
		items[n].keylen = keylen;
		items[n].to = &p->limits[i];
		items[n].from = from[n];
		items[n].nfrom = k;
		n++;
	}
	if (n)
		be->ops->carry(be->impl, items, n, now, carried, NULL);
}
