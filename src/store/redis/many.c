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

#include <assert.h>
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

/* A call over the items order[0..cnt): every limit of each, flattened
 * (the same limit twice in one item is one bucket, charged once). */
static sluice_redis_call_t *new_call(sluice_redis_t *r,
				     const sluice_take_item_t *items,
				     const size_t *order, size_t cnt)
{
	size_t plen = strlen(r->prefix), keys = 0, bytes = 0, i, j, d, k = 0;
	sluice_redis_call_t *c;
	char *name;

	for (i = 0; i < cnt; i++) {
		const sluice_take_item_t *it = &items[order[i]];

		keys += it->nlimits;
		bytes += it->nlimits *
			 (plen + it->keylen + 3 + SLUICE_LIMIT_ID_MAX);
	}
	c = calloc(1, sizeof(*c) + keys * sizeof(sluice_limit_t) +
			      keys * sizeof(sluice_redis_mkey_t) + bytes);
	if (!c)
		return NULL;
	c->r = r;
	c->mk = (sluice_redis_mkey_t *)(c->limits + keys);
	name = (char *)(c->mk + keys);
	for (i = 0; i < cnt; i++) {
		const sluice_take_item_t *it = &items[order[i]];
		size_t first = k;

		for (j = 0; j < it->nlimits; j++) {
			for (d = first; d < k; d++)
				if (sluice_limit_same(&c->limits[d],
						      &it->limits[j]))
					break;
			if (d < k)
				continue;
			c->limits[k] = it->limits[j];
			c->mk[k].cost = it->cost;
			c->mk[k].item = order[i];
			c->mk[k].orig = j;
			c->mk[k].name = name;
			c->mk[k].len =
				key_name(r, plen, it, &it->limits[j], name);
			name += c->mk[k].len;
			k++;
		}
	}
	c->nlimits = k;
	c->shape = &many_shape;
	c->slot = r->cluster
			  ? sluice_redis__key_slot(c->mk[0].name, c->mk[0].len)
			  : 0;
	return c;
}

/* The shortfalls of every key -> each item's decision (the core's, as
 * for one key); *allowed is 1 when every item passed. */
/* A group's reply: each of its items' outputs; allowed when every item
 * passed. */
static int many_parse(sluice_redis_call_t *c, const redisReply *reply,
		      sluice_redis_outcome_t *out)
{
	size_t off = 0, run, which;

	out->allowed = 0;
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != c->nlimits)
		return -1;
	out->allowed = 1;
	for (off = 0; off < c->nlimits; off += run) {
		sluice_take_item_t *it = &c->many->items[c->mk[off].item];

		for (run = 1; off + run < c->nlimits &&
			      c->mk[off + run].item == c->mk[off].item;
		     run++)
			;
		if (sluice_redis__decide_shortfalls(
			    (const redisReply *const *)reply->element + off,
			    c->limits + off, run, c->mk[off].cost, &it->allowed,
			    &it->summary, &which, NULL) < 0)
			return -1;
		assert(off + which < c->nlimits);
		it->summary.which = c->mk[off + which].orig;
		if (!it->allowed)
			out->allowed = 0;
	}
	return 0;
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

	assert(m && c->group < m->ngroups);
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
	size_t i, j, buckets = 0;

	for (i = 0; i < n; i++) {
		const sluice_take_item_t *it = &items[i];

		/* One shortfall per bucket comes back in one array, which
		 * the reader bounds (reply.c). */
		buckets += it->nlimits;
		if (buckets > SLUICE_REDIS_REPLY_MAX_AGGREGATE)
			return SLUICE_EINVAL;

		if (sluice_redis__check_item(r, it->key, it->keylen, it->limits,
					     it->nlimits) < 0)
			return SLUICE_EINVAL;
		/* One script call charges each key once: a key in two items
		 * would be charged for one of them only. */
		for (j = 0; j < i; j++)
			if (items[j].keylen == it->keylen &&
			    (!it->keylen ||
			     memcmp(items[j].key, it->key, it->keylen) == 0))
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

	assert(n >= 2);
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
			else if (adjust == SLUICE_REDIS_ADJUST_BLOCK)
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

int sluice_redis_block(sluice_redis_t *r, const sluice_take_item_t *items,
		       size_t n, uint64_t ms, sluice_redis_many_cb cb,
		       void *arg)
{
	return give_back(r, items, n, 0, SLUICE_REDIS_ADJUST_BLOCK, ms, cb,
			 arg);
}
