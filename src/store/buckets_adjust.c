/*
 * buckets_adjust.c -- the bucket table's calls besides takes: reset,
 * refund, penalize and block of one key's buckets, and the table's
 * counters.
 */
#include "store/buckets_int.h"
#include "util/siphash.h"

#include <string.h>

/* Checks a key's limits, hashes them into h1/h2 and locks its shard:
 * 0 with *out set, SLUICE_EINVAL or SLUICE_ESTORE (the lock). */
static int lock_key(sluice_buckets_t *m, const void *key, size_t keylen,
		    const sluice_limit_t *limits, size_t nlimits, uint64_t *h1,
		    uint64_t *h2, sluice_shard_t **out)
{
	uint64_t h[2];
	sluice_shard_t *s;
	size_t i;

	if (nlimits == 0 || nlimits > SLUICE_MAX_LIMITS || (!key && keylen))
		return SLUICE_EINVAL;
	for (i = 0; i < nlimits; i++)
		if (!sluice_limit_valid(&limits[i]))
			return SLUICE_EINVAL;
	key_hash(m, key, keylen, h);
	s = &m->shards[shard_index(m, h[0])];
	for (i = 0; i < nlimits; i++)
		bucket_id(h, &limits[i], &h1[i], &h2[i]);
	if (shard_lock(s) != 0)
		return SLUICE_ESTORE;
	*out = s;
	return 0;
}

int sluice_buckets_reset(sluice_buckets_t *m, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits)
{
	uint64_t h1[SLUICE_MAX_LIMITS], h2[SLUICE_MAX_LIMITS];
	sluice_shard_t *s;
	size_t i;
	int rc = lock_key(m, key, keylen, limits, nlimits, h1, h2, &s);

	if (rc != 0)
		return rc;
	for (i = 0; i < nlimits; i++) {
		sluice_slot_t *at = find(s, h1[i], h2[i]);

		/* A bucket without a state is full. */
		if (at)
			sluice_shard_remove_at(s, (size_t)(at - s->slots));
	}
	shard_unlock(s);
	return 0;
}

int sluice_buckets_refund(sluice_buckets_t *m, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits,
			  uint64_t cost, int64_t now_us)
{
	uint64_t h1[SLUICE_MAX_LIMITS], h2[SLUICE_MAX_LIMITS];
	sluice_shard_t *s;
	size_t i;
	int rc = lock_key(m, key, keylen, limits, nlimits, h1, h2, &s);

	if (rc != 0)
		return rc;
	for (i = 0; i < nlimits; i++) {
		sluice_slot_t *at = find(s, h1[i], h2[i]);

		/* No state: already full.  A state refunded to full stays in
		 * place (expiry reclaims it): removing it here could move the
		 * slot of a later limit. */
		if (at && !seen_before(h1, h2, i))
			at->state = sluice_refund(&limits[i], at->state, now_us,
						  cost);
	}
	shard_unlock(s);
	return 0;
}

int sluice_buckets_adjust(sluice_buckets_t *m, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits,
			  int block, uint64_t amount, int64_t now_us)
{
	uint64_t h1[SLUICE_MAX_LIMITS], h2[SLUICE_MAX_LIMITS];
	sluice_slot_t *at[SLUICE_MAX_LIMITS];
	sluice_state_t next[SLUICE_MAX_LIMITS];
	sluice_shard_t *s;
	size_t i;
	int rc = lock_key(m, key, keylen, limits, nlimits, h1, h2, &s);

	if (rc != 0)
		return rc;
	for (i = 0; i < nlimits; i++) {
		sluice_state_t cur;

		at[i] = find(s, h1[i], h2[i]);
		cur = at[i] ? at[i]->state : 0;
		next[i] = block ? sluice_block(&limits[i], cur, now_us, amount)
				: sluice_penalize(&limits[i], cur, now_us,
						  amount);
		/* The same limit twice is one bucket, charged once: the
		 * repeat writes nothing (nor over the first's new state). */
		if (seen_before(h1, h2, i)) {
			at[i] = NULL;
			next[i] = 0;
		}
	}
	/* Update in place first: inserting may move slots. */
	for (i = 0; i < nlimits; i++)
		if (at[i])
			at[i]->state = next[i];
	for (i = 0; i < nlimits; i++)
		if (!at[i] && next[i] != 0)
			sluice_shard_insert(s, h1[i], h2[i], next[i], now_us,
					    h1, nlimits);
	shard_unlock(s);
	return 0;
}

void sluice_buckets_stats(sluice_buckets_t *m, sluice_memstore_stats_t *out)
{
	size_t i;

	memset(out, 0, sizeof(*out));
	out->max_keys = m->max_keys;
	for (i = 0; i < m->nshards; i++) {
		sluice_shard_t *s = &m->shards[i];

		if (shard_lock(s) != 0)
			continue; /* counted as nothing */
		out->keys += s->t->count;
		out->expired += s->t->expired;
		out->evicted_full += s->t->evicted_full;
		out->evicted_lossy += s->t->evicted_lossy;
		out->evicted_debt_us += s->t->evicted_debt_us;
		out->recovered += s->t->recovered;
		shard_unlock(s);
	}
}

/* lock_key() for the table's other files (buckets_reserve.c). */
int sluice_buckets_lock_key(sluice_buckets_t *m, const void *key, size_t keylen,
			    const sluice_limit_t *limits, size_t nlimits,
			    uint64_t *h1, uint64_t *h2, sluice_shard_t **out)
{
	return lock_key(m, key, keylen, limits, nlimits, h1, h2, out);
}
