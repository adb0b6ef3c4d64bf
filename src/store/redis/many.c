/*
 * many.c -- sluice_redis_take_many(): several keys, each with its limits
 * and cost, charged all or nothing.
 *
 * On one Redis server every key goes into ONE script_multi.lua call, which
 * Redis runs atomically: either every key is charged or none is, whatever
 * else runs concurrently.  Redis Cluster cannot run one script over keys of
 * different slots, so there the keys are grouped by slot (the limits of one
 * key share its hash tag, hence its slot) and each group is charged by its
 * own atomic call, all in parallel.  When every group allowed, that is the
 * answer; when one rejected or failed, each group that allowed is given
 * back exactly what it was charged (refund.lua, the inverse of the charge
 * on the GCRA state).  docs/REDIS.md states the bound that remains.
 *
 * A take over one key is a one-key call (client.c, and so the SLUICE.TAKE
 * module when loaded); several keys always go through the scripts, whose
 * per-key cost the module commands do not have.
 *
 * The admin calls over items (refund, reset, penalize, block) are here
 * too: one call per item, each a group of its own.
 */
#include "store/redis/redis_int.h"
#include "util/invariant.h"

#include <stdlib.h>
#include <string.h>

/* One take over several keys: its calls, one per slot. */
typedef struct sluice_redis_many_s {
	sluice_redis_t *r;
	sluice_take_item_t *items;
	size_t n;
	sluice_redis_many_cb cb;
	void *arg;
	size_t *group; /* group of each item */
	size_t *order; /* items sorted by group */
	size_t *first; /* each group's start in order[], ngroups + 1 */
	int *ok;       /* each group: answered and allowed (charged) */
	size_t ngroups;
	size_t pending; /* calls in flight, plus one while issuing */
	int status;	/* the first failure, or 0 */
	int rejected;
} many_t;

/* ---------------------------------------------------------- the calls */

/* Appends "<prefix>{<key>}:<limit id>", the name sluice_redis_take()
 * gives the same bucket; returns its length. */
static size_t key_name(const sluice_redis_t *r, size_t plen,
		       const sluice_take_item_t *it, const sluice_limit_t *l,
		       char *name)
{
	size_t n = plen;

	memcpy(name, r->prefix, plen);
	name[n++] = '{';
	if (it->keylen)
		memcpy(name + n, it->key, it->keylen);
	n += it->keylen;
	name[n++] = '}';
	name[n++] = ':';
	return n + sluice_limit_id(l, name + n);
}

static const sluice_redis_shape_t many_shape, give_shape;

/* FNV-1a of a bucket's name, for finding the items that share it. */
static size_t name_hash(const char *name, size_t len)
{
	uint64_t h = 1469598103934665603ull;
	size_t i;

	for (i = 0; i < len; i++)
		h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
	return (size_t)h;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/*
 * A call over the items order[0..cnt): each bucket once, whichever items
 * name it.  Two items may share a bucket (the same key and limit: a
 * request carrying the same descriptor twice, two rules with the same
 * key): the memory store decides each on the state the one before left,
 * and so does this call -- the script charges the bucket once with the
 * costs summed (it passes iff each item in turn would, the costs being
 * whole and the need of each its cost times the interval), and
 * many_parse() decides the items in turn from the shortfalls before.  The
 * same limit twice in one item is one bucket, charged once (as in one
 * memory take).
 */
static sluice_redis_call_t *new_call(sluice_redis_t *r,
				     const sluice_take_item_t *items,
				     const size_t *order, size_t cnt)
{
	size_t plen = strlen(r->prefix), keys = 0, bytes = 0, mask = 1, i, j,
	       k = 0, p = 0;
	size_t *table; /* 1 + the mk index of a bucket, by name_hash() */
	sluice_redis_call_t *c;
	char *name;

	for (i = 0; i < cnt; i++) {
		const sluice_take_item_t *it = &items[order[i]];

		keys += it->nlimits;
		bytes += it->nlimits *
			 (plen + it->keylen + 3 + SLUICE_LIMIT_ID_MAX);
	}
	while (mask < 2 * keys)
		mask <<= 1;
	table = calloc(mask--, sizeof(*table));
	c = calloc(1, sizeof(*c) + keys * sizeof(sluice_limit_t) +
			      keys * sizeof(sluice_redis_mkey_t) +
			      keys * sizeof(size_t) + bytes);
	if (!c || !table) {
		free(table);
		free(c);
		return NULL;
	}
	c->r = r;
	c->mk = (sluice_redis_mkey_t *)(c->limits + keys);
	c->bucket_of = (size_t *)(c->mk + keys);
	name = (char *)(c->bucket_of + keys);
	for (i = 0; i < cnt; i++) {
		const sluice_take_item_t *it = &items[order[i]];

		for (j = 0; j < it->nlimits; j++) {
			size_t len =
				key_name(r, plen, it, &it->limits[j], name);
			size_t h = name_hash(name, len) & mask, d;

			/* Open addressing: the table has twice the room of
			 * the buckets, so a free slot is always found. */
			for (; table[h]; h = (h + 1) & mask) {
				d = table[h] - 1;
				if (c->mk[d].len == len &&
				    memcmp(c->mk[d].name, name, len) == 0)
					break;
			}
			if (table[h]) {
				/* Shared: charged for each item once. */
				if (c->mk[d].item != order[i]) {
					c->mk[d].cost = add_sat(c->mk[d].cost,
								it->cost);
					c->mk[d].item = order[i];
				}
				c->bucket_of[p++] = d;
				continue;
			}
			table[h] = k + 1;
			c->limits[k] = it->limits[j];
			c->mk[k].cost = it->cost;
			c->mk[k].item = order[i];
			c->mk[k].name = name;
			c->mk[k].len = len;
			name += len;
			c->bucket_of[p++] = k++;
		}
	}
	free(table);
	c->nlimits = k;
	c->shape = &many_shape;
	c->slot = r->cluster
			  ? sluice_redis__key_slot(c->mk[0].name, c->mk[0].len)
			  : 0;
	return c;
}

/*
 * A group's reply, the shortfall of each bucket before the call: each of
 * its items decided in turn by the core, as the memory store does
 * (sluice_memstore_take_many()), each from the states the items before
 * it left; allowed when every item passed.
 */
static int many_parse(sluice_redis_call_t *c, const redisReply *reply,
		      sluice_redis_outcome_t *out)
{
	const many_t *m = c->many;
	const size_t *order = m->order + m->first[c->group];
	size_t cnt = m->first[c->group + 1] - m->first[c->group];
	sluice_state_t stack[SLUICE_MAX_LIMITS], *st = stack;
	size_t i, j, p = 0, skew = SIZE_MAX;
	/* quota.lua answers the states at the server's time, the other
	 * scripts the shortfalls (states at time 0). */
	const int quota = sluice_redis__has_quota(c->limits, c->nlimits);
	int64_t now = 0;
	int rc = -1;

	out->allowed = 0;
	if (reply->type != REDIS_REPLY_ARRAY ||
	    (!quota && reply->elements != c->nlimits))
		return -1;
	if (c->nlimits > SLUICE_MAX_LIMITS &&
	    !(st = malloc(c->nlimits * sizeof(*st))))
		return -1;
	if (quota) {
		int q = sluice_redis__quota_states(c, reply, c->limits,
						   c->nlimits, &now, st, &skew);

		if (q < 0)
			goto out;
		if (q == 0)
			skew = SIZE_MAX;
	}
	for (j = 0; !quota && j < c->nlimits; j++)
		if (sluice_redis__shortfall_state(reply->element[j],
						  &c->limits[j], &st[j]) < 0)
			goto out;
	out->allowed = skew == SIZE_MAX;
	for (i = 0; i < cnt; i++) {
		sluice_take_item_t *it = &m->items[order[i]];
		sluice_state_t cur[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
		sluice_decision_t ds[SLUICE_MAX_LIMITS];

		SLUICE_ASSERT(it->nlimits <= SLUICE_MAX_LIMITS);
		if (skew != SIZE_MAX) {
			/* A client clock far off: every item refused. */
			it->allowed = 0;
			sluice_redis__quota_skewed(&c->limits[skew], 0,
						   &it->summary);
			p += it->nlimits;
			continue;
		}
		for (j = 0; j < it->nlimits; j++)
			cur[j] = st[c->bucket_of[p + j]];
		it->allowed = sluice_eval_all(it->limits, cur, it->nlimits, now,
					      it->cost, next, ds, &it->summary);
		for (j = 0; j < it->nlimits; j++)
			st[c->bucket_of[p + j]] = next[j];
		p += it->nlimits;
		sluice_redis__whole_ms(&it->summary);
		if (!it->allowed)
			out->allowed = 0;
	}
	rc = 0;
out:
	if (st != stack)
		free(st);
	return rc;
}

/* --------------------------------------------------- the take as a whole */

static void many_free(many_t *m)
{
	free(m->group);
	free(m->order);
	free(m->first);
	free(m->ok);
	free(m);
}

/* Gives group g back what it was charged (best effort: a refund that
 * fails leaves the charge, which over-limits, never under-limits). */
static void refund(many_t *m, size_t g)
{
	sluice_redis_call_t *c;

	if (m->r->closing)
		return;
	c = new_call(m->r, m->items, m->order + m->first[g],
		     m->first[g + 1] - m->first[g]);
	if (!c)
		return;
	c->shape = &give_shape;
	c->refund = 1;
	c->done = 0;
	sluice_redis__start(c);
}

static void many_unref(many_t *m)
{
	size_t g;

	SLUICE_ASSERT(m->pending > 0); /* one unref per group, one by issuing */
	if (--m->pending)
		return;
	if (m->status || m->rejected)
		for (g = 0; g < m->ngroups; g++)
			if (m->ok[g])
				refund(m, g);
	m->cb(m->arg, m->status, !m->status && !m->rejected);
	many_free(m);
}

/* A group's answer, counted in its take. */
static void many_done(sluice_redis_call_t *c, int status,
		      const sluice_redis_outcome_t *out)
{
	many_t *m = c->many;

	SLUICE_ASSERT(m && c->group < m->ngroups);
	if (status == 0) {
		m->ok[c->group] = out->allowed;
		if (!out->allowed)
			m->rejected = 1;
	} else if (!m->status) {
		m->status = status;
	}
	many_unref(m);
}

static int check_items(const sluice_redis_t *r, const sluice_take_item_t *items,
		       size_t n)
{
	size_t i, buckets = 0;

	for (i = 0; i < n; i++) {
		const sluice_take_item_t *it = &items[i];

		/* One shortfall per bucket comes back in one array, which
		 * the reader bounds (reply.c). */
		buckets += it->nlimits;
		if (buckets > SLUICE_REDIS_REPLY_MAX_AGGREGATE)
			return SLUICE_EINVAL;

		/* Items may share keys, and buckets (new_call()). */
		if (sluice_redis__check_item(r, it->key, it->keylen, it->limits,
					     it->nlimits) < 0)
			return SLUICE_EINVAL;
	}
	return 0;
}

/* Groups the items by slot (one group on a single server). */
static int group_items(many_t *m)
{
	sluice_redis_t *r = m->r;
	size_t plen = strlen(r->prefix), i, g;
	int *slot = calloc(m->n, sizeof(*slot));
	size_t *count;

	m->group = calloc(m->n, sizeof(*m->group));
	m->order = calloc(m->n, sizeof(*m->order));
	m->first = calloc(m->n + 1, sizeof(*m->first));
	m->ok = calloc(m->n, sizeof(*m->ok));
	if (!slot || !m->group || !m->order || !m->first || !m->ok) {
		free(slot);
		return SLUICE_ENOMEM;
	}
	for (i = 0; i < m->n && r->cluster; i++) {
		const sluice_take_item_t *it = &m->items[i];
		char stack[256], *kb = stack;
		size_t len = plen + it->keylen + 3;

		if (len > sizeof(stack) && !(kb = malloc(len))) {
			free(slot);
			return SLUICE_ENOMEM;
		}
		memcpy(kb, r->prefix, plen);
		kb[plen] = '{';
		if (it->keylen)
			memcpy(kb + plen + 1, it->key, it->keylen);
		memcpy(kb + plen + 1 + it->keylen, "}:", 2);
		slot[i] = sluice_redis__key_slot(kb, len);
		if (kb != stack)
			free(kb);
	}
	m->ngroups = 0;
	for (i = 0; i < m->n; i++) {
		for (g = 0; g < i; g++)
			if (slot[g] == slot[i])
				break;
		m->group[i] = g < i ? m->group[g] : m->ngroups++;
	}
	free(slot);
	/* Counting sort of the items by group. */
	count = m->first;
	for (i = 0; i < m->n; i++)
		count[m->group[i] + 1]++;
	for (g = 0; g < m->ngroups; g++)
		count[g + 1] += count[g];
	{
		size_t *fill = calloc(m->ngroups, sizeof(*fill));

		if (!fill)
			return SLUICE_ENOMEM;
		for (i = 0; i < m->n; i++)
			m->order[m->first[m->group[i]] + fill[m->group[i]]++] =
				i;
		free(fill);
	}
	return 0;
}

static const sluice_redis_shape_t many_shape = {many_parse, many_done};

int sluice_redis__take_many(sluice_redis_t *r, sluice_take_item_t *items,
			    size_t n, sluice_redis_many_cb cb, void *arg)
{
	sluice_redis_call_t **calls;
	many_t *m;
	size_t g;
	int rc;

	SLUICE_ASSERT(n >= 2);
	if ((rc = check_items(r, items, n)) < 0)
		return rc;
	if (!(m = calloc(1, sizeof(*m))))
		return SLUICE_ENOMEM;
	m->r = r;
	m->items = items;
	m->n = n;
	m->cb = cb;
	m->arg = arg;
	if ((rc = group_items(m)) < 0) {
		many_free(m);
		return rc;
	}
	/* Every call is built before any is sent, so that running out of
	 * memory fails the take before anything is charged. */
	calls = calloc(m->ngroups, sizeof(*calls));
	for (g = 0; calls && g < m->ngroups; g++)
		if (!(calls[g] = new_call(r, items, m->order + m->first[g],
					  m->first[g + 1] - m->first[g])))
			break;
	if (!calls || g < m->ngroups) {
		while (calls && g-- > 0)
			free(calls[g]);
		free(calls);
		many_free(m);
		return SLUICE_ENOMEM;
	}
	m->pending = 1 + m->ngroups;
	for (g = 0; g < m->ngroups; g++) {
		calls[g]->many = m;
		calls[g]->group = g;
		sluice_redis__start(calls[g]);
	}
	free(calls);
	many_unref(m);
	return 0;
}

/* ---------------------------------------------------- refund and reset */

/* One admin refund or reset: its calls, one per item. */
typedef struct give_s {
	sluice_redis_many_cb cb;
	void *arg;
	size_t pending;
	int status;
} give_t;

static void give_unref(give_t *g)
{
	SLUICE_ASSERT(g->pending > 0); /* one unref per call, one by issuing */
	if (--g->pending)
		return;
	g->cb(g->arg, g->status, !g->status);
	free(g);
}

/* An admin call's reply says nothing to decide. */
static int give_parse(sluice_redis_call_t *c, const redisReply *reply,
		      sluice_redis_outcome_t *out)
{
	(void)c;
	(void)reply;
	out->allowed = 0;
	return 0;
}

/* An admin call counts in its give_t; a cluster take's refunds (no
 * give_t) answer nobody. */
static void give_done(sluice_redis_call_t *c, int status,
		      const sluice_redis_outcome_t *out)
{
	give_t *g = c->arg;

	(void)out;
	if (!g)
		return;
	if (status && !g->status)
		g->status = status;
	give_unref(g);
}

static const sluice_redis_shape_t give_shape = {give_parse, give_done};

/* refund.lua moves each state back by need (cost * interval); a reset
 * sends cost UINT64_MAX, whose need exceeds any shortfall a charge or a
 * penalty can leave (script.c), so the script deletes the state. */
static int give_back(sluice_redis_t *r, const sluice_take_item_t *items,
		     size_t n, uint64_t all, int adjust, uint64_t ms,
		     sluice_redis_many_cb cb, void *arg)
{
	sluice_redis_call_t **calls;
	size_t i, j;
	give_t *g;

	if (!cb || n == 0 || !items || r->closing)
		return SLUICE_EINVAL;
	for (i = 0; i < n; i++)
		if (sluice_redis__check_item(r, items[i].key, items[i].keylen,
					     items[i].limits,
					     items[i].nlimits) < 0)
			return SLUICE_EINVAL;
	g = calloc(1, sizeof(*g));
	calls = calloc(n, sizeof(*calls));
	for (i = 0; g && calls && i < n; i++)
		if (!(calls[i] = new_call(r, items, &i, 1)))
			break;
	if (!g || !calls || i < n) {
		while (calls && i-- > 0)
			free(calls[i]);
		free(calls);
		free(g);
		return SLUICE_ENOMEM;
	}
	g->cb = cb;
	g->arg = arg;
	g->pending = 1 + n;
	for (i = 0; i < n; i++) {
		for (j = 0; j < calls[i]->nlimits; j++)
			if (all)
				calls[i]->mk[j].cost = UINT64_MAX;
			else if (adjust == SLUICE_REDIS_ADJUST_BLOCK ||
				 adjust == SLUICE_REDIS_ADJUST_SET)
				calls[i]->mk[j].cost = ms;
		calls[i]->refund = !adjust;
		calls[i]->adjust = adjust;
		calls[i]->shape = &give_shape;
		calls[i]->arg = g;
		sluice_redis__start(calls[i]);
	}
	free(calls);
	give_unref(g);
	return 0;
}

int sluice_redis_refund(sluice_redis_t *r, const sluice_take_item_t *items,
			size_t n, sluice_redis_many_cb cb, void *arg)
{
	return give_back(r, items, n, 0, SLUICE_REDIS_ADJUST_NONE, 0, cb, arg);
}

int sluice_redis_reset(sluice_redis_t *r, const sluice_take_item_t *items,
		       size_t n, sluice_redis_many_cb cb, void *arg)
{
	return give_back(r, items, n, 1, SLUICE_REDIS_ADJUST_NONE, 0, cb, arg);
}

/* adjust.lua moves each state forward: by the item's cost (a penalty),
 * or to a shortfall that lets nothing pass for ms (a block). */
int sluice_redis_penalize(sluice_redis_t *r, const sluice_take_item_t *items,
			  size_t n, sluice_redis_many_cb cb, void *arg)
{
	return give_back(r, items, n, 0, SLUICE_REDIS_ADJUST_PENALIZE, 0, cb,
			 arg);
}

/* carry.lua moves a key's usage to its limit now from its earlier ones:
 * one call over the buckets [to, from...] of the key (one hash tag, one
 * slot), each limit once. */
int sluice_redis_carry(sluice_redis_t *r, const void *key, size_t keylen,
		       const sluice_limit_t *to, const sluice_limit_t *from,
		       size_t nfrom, sluice_redis_many_cb cb, void *arg)
{
	sluice_limit_t limits[SLUICE_MAX_LIMITS];
	sluice_take_item_t item;
	size_t i, j, n = 1;

	if (!to || (!from && nfrom) || nfrom >= SLUICE_MAX_LIMITS)
		return SLUICE_EINVAL;
	limits[0] = *to;
	for (i = 0; i < nfrom; i++) {
		for (j = 0; j < n; j++)
			if (sluice_limit_same(&limits[j], &from[i]))
				break;
		if (j == n)
			limits[n++] = from[i];
	}
	memset(&item, 0, sizeof(item));
	item.key = key;
	item.keylen = keylen;
	item.limits = limits;
	item.nlimits = n;
	return give_back(r, &item, 1, 0, SLUICE_REDIS_ADJUST_CARRY, 0, cb, arg);
}

int sluice_redis_block(sluice_redis_t *r, const sluice_take_item_t *items,
		       size_t n, uint64_t ms, sluice_redis_many_cb cb,
		       void *arg)
{
	return give_back(r, items, n, 0, SLUICE_REDIS_ADJUST_BLOCK, ms, cb,
			 arg);
}

/* set.lua writes each state to hold ms tokens (here: the tokens). */
int sluice_redis_set(sluice_redis_t *r, const sluice_take_item_t *items,
		     size_t n, uint64_t remaining, sluice_redis_many_cb cb,
		     void *arg)
{
	return give_back(r, items, n, 0, SLUICE_REDIS_ADJUST_SET, remaining, cb,
			 arg);
}
