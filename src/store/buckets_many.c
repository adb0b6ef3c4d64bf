/*
 * buckets_many.c -- takes of several keys in the bucket table, all or
 * nothing (sluice_memstore_take_many()).
 */
#include "store/buckets_int.h"
#include "util/invariant.h"
#include "util/siphash.h"

#include <stdlib.h>

/*
 * sluice_memstore_take_many(): the shards of every item are locked
 * together, in ascending order (so two takes over overlapping shards can
 * never wait on each other in a cycle), the items are decided on the
 * states as they are, and only when every one passes are their new states
 * written.  Between the first lock and the last unlock no other take sees
 * any of these buckets, which is what makes the verdict all-or-nothing
 * under any number of threads.  A bucket that several items share (the
 * same key and limit) is decided for each on the state the previous one
 * left; within one item the same limit twice is one bucket, as in
 * sluice_memstore_take().
 */

/* Up to this many buckets a call protects all of its buckets from its own
 * evictions; beyond, each item protects its own (bounded eviction cost). */
#define MANY_KEEP_ALL 256

typedef struct bucket_s {
	uint64_t h1, h2;
	size_t item, shard;
	sluice_state_t cur, next;
	int found; /* it had a state when the call began */
} bucket_t;

static int many_check(const sluice_take_item_t *items, size_t n, size_t *total)
{
	size_t i, j;

	*total = 0;
	for (i = 0; i < n; i++) {
		const sluice_take_item_t *it = &items[i];

		if (it->nlimits == 0 || it->nlimits > SLUICE_MAX_LIMITS ||
		    !it->limits || (!it->key && it->keylen))
			return SLUICE_EINVAL;
		for (j = 0; j < it->nlimits; j++)
			if (!sluice_limit_valid(&it->limits[j]))
				return SLUICE_EINVAL;
		*total += it->nlimits;
	}
	return 0;
}

/* Every item's buckets, flat, in order; the shards to lock. */
static void many_buckets(sluice_buckets_t *m, const sluice_take_item_t *items,
			 size_t n, bucket_t *b, uint64_t *shards)
{
	size_t i, j, k = 0;

	*shards = 0;
	for (i = 0; i < n; i++) {
		uint64_t h[2];
		size_t shard;

		key_hash(m, items[i].key, items[i].keylen, h);
		shard = shard_index(m, h[0]);
		*shards |= UINT64_C(1) << shard;
		for (j = 0; j < items[i].nlimits; j++, k++) {
			bucket_id(h, &items[i].limits[j], &b[k].h1, &b[k].h2);
			b[k].item = i;
			b[k].shard = shard;
		}
	}
}

/* The state bucket k starts from: the table's, or what the latest earlier
 * occurrence of the same bucket left (its starting state when that is in
 * the same item: one limit given twice is one bucket). */
static void many_start(sluice_buckets_t *m, bucket_t *b, size_t k)
{
	size_t j;
	sluice_slot_t *sl;

	for (j = k; j-- > 0;)
		if (b[j].h1 == b[k].h1 && b[j].h2 == b[k].h2) {
			b[k].cur =
				b[j].item == b[k].item ? b[j].cur : b[j].next;
			b[k].found = 1;
			return;
		}
	sl = find(&m->shards[b[k].shard], b[k].h1, b[k].h2);
	b[k].found = sl != NULL;
	b[k].cur = sl ? sl->state : 0;
}

/* Decides item it over its buckets b[0..nlimits); 1 when it passes. */
static int many_decide(sluice_buckets_t *m, sluice_take_item_t *it, bucket_t *b,
		       bucket_t *all, int64_t now_us)
{
	sluice_state_t cur[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
	sluice_decision_t dec[SLUICE_MAX_LIMITS];
	size_t j;

	for (j = 0; j < it->nlimits; j++) {
		many_start(m, all, (size_t)(b - all) + j);
		cur[j] = b[j].cur;
	}
	it->allowed = sluice_eval_all(it->limits, cur, it->nlimits, now_us,
				      it->cost, next, dec, &it->summary);
	for (j = 0; j < it->nlimits; j++)
		b[j].next = next[j];
	return it->allowed;
}

/* Writes bucket k's new state (looked up again: an insert for an earlier
 * bucket may have moved slots of this shard).  Later occurrences of the
 * same bucket write after it, so the last state stands. */
static void many_commit(sluice_buckets_t *m, const bucket_t *b, size_t k,
			int64_t now_us, const uint64_t *keep, size_t nkeep)
{
	sluice_shard_t *s = &m->shards[b[k].shard];
	sluice_slot_t *sl = find(s, b[k].h1, b[k].h2);

	if (sl)
		sl->state = b[k].next;
	else if (b[k].next != b[k].cur || b[k].found)
		sluice_shard_insert(s, b[k].h1, b[k].h2, b[k].next, now_us,
				    keep, nkeep);
}

int sluice_buckets_take_many(sluice_buckets_t *m, sluice_take_item_t *items,
			     size_t n, int64_t now_us)
{
	bucket_t stack_b[SLUICE_MAX_LIMITS], *b = stack_b;
	uint64_t stack_keep[SLUICE_MAX_LIMITS], *keep = stack_keep, shards,
						rest;
	size_t i, k, total, first;
	int all = 1, rc, last;

	if ((rc = many_check(items, n, &total)) < 0)
		return rc;
	if (n == 0)
		return 1;
	if (total > SLUICE_MAX_LIMITS) {
		b = malloc(total * sizeof(*b));
		keep = malloc(total * sizeof(*keep));
		if (!b || !keep) {
			rc = SLUICE_ENOMEM;
			goto out;
		}
	}
	many_buckets(m, items, n, b, &shards);
	for (k = 0; k < total; k++)
		keep[k] = b[k].h1;

	/* Lock ordering: ascending shard index (lowest bit first), the same
	 * in every take, so two takes never wait on each other in a cycle. */
	SLUICE_ASSERT(m->nshards == 64 || shards >> m->nshards == 0);
	for (rest = shards, last = -1; rest; rest &= rest - 1) {
		SLUICE_ASSERT(__builtin_ctzll(rest) > last);
		last = __builtin_ctzll(rest);
		if (shard_lock(&m->shards[last]) != 0) {
			/* Unlock what this call holds, and fail. */
			uint64_t held = shards & ~rest;

			for (; held; held &= held - 1)
				shard_unlock(&m->shards[__builtin_ctzll(held)]);
			rc = SLUICE_ESTORE;
			goto out;
		}
	}
	/* Every bucket's home slot requested at once: the misses overlap. */
	for (k = 0; k < total; k++) {
		const sluice_shard_t *s = &m->shards[b[k].shard];

		__builtin_prefetch(&s->slots[b[k].h1 & s->mask], 1, 0);
	}
	for (i = 0, k = 0; i < n; k += items[i++].nlimits)
		if (!many_decide(m, &items[i], &b[k], b, now_us))
			all = 0;
	if (all)
		for (i = 0, first = 0; i < n; first += items[i++].nlimits)
			for (k = first; k < first + items[i].nlimits; k++)
				many_commit(m, b, k, now_us,
					    total <= MANY_KEEP_ALL
						    ? keep
						    : keep + first,
					    total <= MANY_KEEP_ALL
						    ? total
						    : items[i].nlimits);
	for (i = m->nshards; i-- > 0;)
		if (shards >> i & 1) {
			reclaim_step(&m->shards[i], now_us, RECLAIM_STEP);
			shard_unlock(&m->shards[i]);
		}
	sluice_buckets_reclaim_elsewhere(m, now_us);
	rc = all;
out:
	if (b != stack_b)
		free(b);
	if (keep != stack_keep)
		free(keep);
	return rc;
}
