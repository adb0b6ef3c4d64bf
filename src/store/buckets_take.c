/*
 * buckets_take.c -- takes in the bucket table: one key's (the hot path:
 * sluice_memstore_take() and the shared-memory store's), several keys one
 * by one with their cache misses overlapped, and peeks.  A key's buckets
 * are its hash XORed with each limit (bucket_id(), buckets_int.h), all in
 * the shard its hash names, charged under that shard's one lock.
 */
#include "core/decide.h"
#include "store/buckets_int.h"
#include "util/siphash.h"

/* A valid key and limits (as sluice_memstore_take() requires). */
static int take_args_ok(const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits)
{
	size_t i;

	if (nlimits == 0 || nlimits > SLUICE_MAX_LIMITS || !limits ||
	    (!key && keylen))
		return 0;
	for (i = 0; i < nlimits; i++)
		if (!sluice_limit_valid(&limits[i]))
			return 0;
	return 1;
}

/*
 * Asks the memory system for the lines a lookup of bucket h1 reads first:
 * its home slot and the two after it, so that their misses overlap.  Three
 * 24-byte slots span 72 bytes, at most two lines (a slot starts 8-byte
 * aligned): the same two prefetches as for two slots, and a probe that
 * ends two slots on (one in five in a table 3/5 full) waits for no second
 * miss.  Without the shard's lock: the slot array and its size are read
 * atomically (sluice_shard_grow() replaces them under the lock) and a
 * prefetch of a stale address is only a wasted hint.
 */
static void prefetch_bucket(const sluice_shard_t *s, uint64_t h1)
{
	const sluice_slot_t *slots =
		__atomic_load_n(&s->slots, __ATOMIC_RELAXED);
	uint64_t mask = __atomic_load_n(&s->mask, __ATOMIC_RELAXED);
	const char *at = (const char *)&slots[h1 & mask];

	__builtin_prefetch(at, 1, 0);
	if ((h1 & mask) + 2 <= mask)
		__builtin_prefetch(at + 3 * sizeof(sluice_slot_t) - 1, 1, 0);
}

/* sluice_buckets_take() of a checked key whose hash is h, or (commit 0)
 * the decision it would get, charging nothing. */
static int take_hashed(sluice_buckets_t *m, const uint64_t h[2],
		       const sluice_limit_t *limits, size_t nlimits,
		       uint64_t cost, int64_t now_us,
		       sluice_decision_t *decisions, sluice_decision_t *summary,
		       int commit)
{
	sluice_state_t cur[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
	sluice_decision_t local[SLUICE_MAX_LIMITS], sum;
	uint64_t h1[SLUICE_MAX_LIMITS], h2[SLUICE_MAX_LIMITS];
	sluice_slot_t *at[SLUICE_MAX_LIMITS];
	sluice_shard_t *s = shard_of(m, h);
	size_t i;
	int allowed;

	if (!decisions)
		decisions = local;
	/* The slots' cache misses start before the lock is taken, and
	 * overlap it (and the sweep of another shard, whose own misses
	 * would otherwise come after). */
	for (i = 0; i < nlimits; i++) {
		bucket_id(h, &limits[i], &h1[i], &h2[i]);
		prefetch_bucket(s, h1[i]);
	}
	if (commit) {
		/* And the slots the reclaim step at the end will read. */
		prefetch_slots(s, reclaim_cursor(s), RECLAIM_STEP);
		sluice_buckets_reclaim_elsewhere(m, now_us);
	}

	if (shard_lock(s) != 0)
		return SLUICE_ESTORE;
	for (i = 0; i < nlimits; i++) {
		at[i] = find(s, h1[i], h2[i]);
		cur[i] = at[i] ? at[i]->state : 0;
	}
	allowed = sluice_eval_all(limits, cur, nlimits, now_us, cost, next,
				  decisions, &sum);
	if (!commit) {
		shard_unlock(s);
		if (summary)
			*summary = sum;
		return allowed;
	}
	/* Update in place first: inserting may move slots. */
	for (i = 0; i < nlimits; i++)
		if (at[i] && next[i] != cur[i])
			at[i]->state = next[i];
	for (i = 0; i < nlimits; i++)
		if (!at[i] && next[i] != cur[i] && !seen_before(h1, h2, i))
			sluice_shard_insert(s, h1[i], h2[i], next[i], now_us,
					    h1, nlimits);
	reclaim_step(s, now_us, RECLAIM_STEP);
	shard_unlock(s);

	if (summary)
		*summary = sum;
	return allowed;
}

/*
 * take_hashed() of one limit, committing: the same decision and the same
 * writes in the same order, without the bookkeeping of several limits
 * (sluice_eval_all() of one limit is sluice_eval(), here in line: a
 * refused decision leaves the state as it was).  The common take, arranged
 * around its cache miss on the bucket's slot: a processor runs only a few
 * hundred instructions past a load that waits, so a take costs that miss plus
 * the instructions from the slot's read to the next take's prefetch that do not
 * fit in that shadow.  What needs neither the slot nor a decision (checking the
 * limit when check is 1, the sweep elsewhere, the lock) runs between the
 * prefetch and the read.
 */
static inline __attribute__((always_inline)) int
take_one_hashed(sluice_buckets_t *m, const uint64_t h[2],
		const sluice_limit_t *limit, uint64_t cost, int64_t now_us,
		sluice_decision_t *decisions, sluice_decision_t *summary,
		int check)
{
	sluice_shard_t *s = shard_of(m, h);
	sluice_state_t cur, next;
	sluice_decision_t d;
	sluice_slot_t *at;
	uint64_t h1, h2;

	bucket_id(h, limit, &h1, &h2);
	prefetch_bucket(s, h1);
	prefetch_slots(s, reclaim_cursor(s), RECLAIM_STEP);
	/* A prefetch is only a hint: an invalid limit changes nothing. */
	if (check && !sluice_limit_valid_inline(limit))
		return SLUICE_EINVAL;
	sluice_buckets_reclaim_elsewhere(m, now_us);

	if (shard_lock(s) != 0)
		return SLUICE_ESTORE;
	at = find(s, h1, h2);
	cur = at ? at->state : 0;
	sluice_eval_inline(limit, cur, now_us, cost, &next, &d);
	if (next != cur) {
		if (at)
			at->state = next;
		else
			sluice_shard_insert(s, h1, h2, next, now_us, &h1, 1);
	}
	reclaim_step(s, now_us, RECLAIM_STEP);
	shard_unlock(s);

	if (decisions)
		*decisions = d;
	if (summary)
		*summary = d;
	return d.allowed;
}

#if SLUICE_HAVE_AESHASH
/* take_one() of a key the table's AES hash takes, the hash in line. */
static SLUICE_AES_TARGET int
take_one_aes(sluice_buckets_t *m, const void *key, size_t keylen,
	     const sluice_limit_t *limit, uint64_t cost, int64_t now_us,
	     sluice_decision_t *decisions, sluice_decision_t *summary)
{
	uint64_t h[2];

	sluice_aeshash_in(m->aes, key, keylen, h);
	mark_class(key, keylen, h);
	return take_one_hashed(m, h, limit, cost, now_us, decisions, summary,
			       1);
}
#endif

/* take_one() of a key SipHash names. */
static __attribute__((noinline)) int
take_one_sip(sluice_buckets_t *m, const void *key, size_t keylen,
	     const sluice_limit_t *limit, uint64_t cost, int64_t now_us,
	     sluice_decision_t *decisions, sluice_decision_t *summary)
{
	uint64_t h[2];

	sluice_siphash13_128_in(m->seed, key, keylen, h);
	mark_class(key, keylen, h);
	return take_one_hashed(m, h, limit, cost, now_us, decisions, summary,
			       1);
}

/* sluice_buckets_take() of one limit: the key is hashed before the limit
 * is checked (as take_args_ok() would), so that the check runs in the
 * shadow of the slot's miss.  Each road is a function of its own that
 * this one jumps to, so that none pays for another's saved registers. */
static int take_one(sluice_buckets_t *m, const void *key, size_t keylen,
		    const sluice_limit_t *limit, uint64_t cost, int64_t now_us,
		    sluice_decision_t *decisions, sluice_decision_t *summary)
{
	if (!limit || (!key && keylen))
		return SLUICE_EINVAL;
#if SLUICE_HAVE_AESHASH
	if (m->aes && keylen <= SLUICE_AESHASH_MAX)
		return take_one_aes(m, key, keylen, limit, cost, now_us,
				    decisions, summary);
#endif
	return take_one_sip(m, key, keylen, limit, cost, now_us, decisions,
			    summary);
}

/* A take (commit 1) or a peek of a key not yet checked or hashed. */
static int take_key(sluice_buckets_t *m, const void *key, size_t keylen,
		    const sluice_limit_t *limits, size_t nlimits, uint64_t cost,
		    int64_t now_us, sluice_decision_t *decisions,
		    sluice_decision_t *summary, int commit)
{
	uint64_t h[2];

	if (!take_args_ok(key, keylen, limits, nlimits))
		return SLUICE_EINVAL;
	key_hash(m, key, keylen, h);
	return take_hashed(m, h, limits, nlimits, cost, now_us, decisions,
			   summary, commit);
}

/* sluice_buckets_take() of several limits (out of line, as take_one_sip()
 * is). */
static __attribute__((noinline)) int
take_several(sluice_buckets_t *m, const void *key, size_t keylen,
	     const sluice_limit_t *limits, size_t nlimits, uint64_t cost,
	     int64_t now_us, sluice_decision_t *decisions,
	     sluice_decision_t *summary)
{
	return take_key(m, key, keylen, limits, nlimits, cost, now_us,
			decisions, summary, 1);
}

int sluice_buckets_take(sluice_buckets_t *m, const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits,
			uint64_t cost, int64_t now_us,
			sluice_decision_t *decisions,
			sluice_decision_t *summary)
{
	if (nlimits == 1)
		return take_one(m, key, keylen, limits, cost, now_us, decisions,
				summary);
	return take_several(m, key, keylen, limits, nlimits, cost, now_us,
			    decisions, summary);
}

int sluice_buckets_peek(sluice_buckets_t *m, const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits,
			uint64_t cost, int64_t now_us,
			sluice_decision_t *decisions,
			sluice_decision_t *summary)
{
	return take_key(m, key, keylen, limits, nlimits, cost, now_us,
			decisions, summary, 0);
}

/*
 * Asks the memory system for the slot where a key's first bucket would
 * start its probe, ahead of the take that reads it, so that the cache
 * misses of several keys overlap.  It runs without the shard's lock: the
 * slot array and its size are read atomically (sluice_shard_grow() replaces
 * them under the lock) and a prefetch of a stale address is only a wasted hint.
 */
static void prefetch_home(sluice_buckets_t *m, const uint64_t h[2],
			  const sluice_limit_t *limit)
{
	sluice_shard_t *s = shard_of(m, h);
	sluice_slot_t *slots = __atomic_load_n(&s->slots, __ATOMIC_RELAXED);
	uint64_t mask = __atomic_load_n(&s->mask, __ATOMIC_RELAXED);
	uint64_t h1, h2;

	bucket_id(h, limit, &h1, &h2);
	__builtin_prefetch(&slots[h1 & mask], 1, 0);
}

/* Keys hashed and prefetched ahead of the one being decided. */
#define EACH_AHEAD 8

int sluice_buckets_take_each(sluice_buckets_t *m, sluice_take_item_t *items,
			     size_t n, int64_t now_us)
{
	uint64_t h[EACH_AHEAD][2];
	size_t i, ahead;
	int allowed = 0, rc;

	if (n > 0 && !items)
		return SLUICE_EINVAL;
	for (i = 0; i < n; i++)
		if (!take_args_ok(items[i].key, items[i].keylen,
				  items[i].limits, items[i].nlimits))
			return SLUICE_EINVAL;
	ahead = n < EACH_AHEAD ? n : EACH_AHEAD;
	for (i = 0; i < ahead; i++) {
		key_hash(m, items[i].key, items[i].keylen, h[i]);
		prefetch_home(m, h[i], &items[i].limits[0]);
	}
	for (i = 0; i < n; i++) {
		sluice_take_item_t *it = &items[i];
		uint64_t *hi = h[i % EACH_AHEAD];
		size_t j = i + EACH_AHEAD;

		rc = it->nlimits == 1
			     ? take_one_hashed(m, hi, it->limits, it->cost,
					       now_us, NULL, &it->summary, 0)
			     : take_hashed(m, hi, it->limits, it->nlimits,
					   it->cost, now_us, NULL, &it->summary,
					   1);
		if (rc < 0)
			return rc;
		it->allowed = rc;
		allowed += rc;
		if (j < n) {
			key_hash(m, items[j].key, items[j].keylen, hi);
			prefetch_home(m, hi, &items[j].limits[0]);
		}
	}
	return allowed;
}
