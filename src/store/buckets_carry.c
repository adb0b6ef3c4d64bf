/*
 * buckets_carry.c -- a key's usage carried to a changed limit, in the
 * bucket table both local stores share.
 *
 * A bucket is named by key + limit, so a changed limit names a new
 * bucket.  When the host knows which limits a key's bucket may have been
 * charged under before (the config the running one replaced), it calls
 * this before the take: under the shard's lock, when the new bucket holds
 * no state (absent or full), the first earlier bucket that does is
 * carried into it (sluice_carry(): what was used stays used).  Every
 * earlier bucket found is removed, carried or not: its usage now lives in
 * the new bucket (or the new bucket's own state, written since, is the
 * newer one), and a later change back to that limit must not find it
 * stale.  So usage is counted once: carrying again changes nothing.
 */
#include "store/buckets_int.h"

int sluice_buckets_carry(sluice_buckets_t *m, const void *key, size_t keylen,
			 const sluice_limit_t *to, const sluice_limit_t *from,
			 size_t nfrom, int64_t now_us)
{
	uint64_t h[2], h1, h2, f1, f2;
	sluice_state_t state = 0;
	sluice_shard_t *s;
	sluice_slot_t *at;
	const int64_t full = dead_from(now_us);
	size_t i;
	int carried = 0;

	if (!to || (!from && nfrom) || (!key && keylen) ||
	    nfrom > SLUICE_MAX_LIMITS || !sluice_limit_valid(to))
		return SLUICE_EINVAL;
	for (i = 0; i < nfrom; i++)
		if (!sluice_limit_valid(&from[i]))
			return SLUICE_EINVAL;
	key_hash(m, key, keylen, h);
	s = &m->shards[shard_index(m, h[0])];
	bucket_id(h, to, &h1, &h2);
	if (shard_lock(s) != 0)
		return SLUICE_ESTORE;
	at = find(s, h1, h2);
	/* The new bucket's own state, when it has one, is the newer. */
	if (at && at->state > full)
		carried = -1;
	for (i = 0; i < nfrom; i++) {
		sluice_slot_t *old;

		if (sluice_limit_same(&from[i], to))
			continue;
		bucket_id(h, &from[i], &f1, &f2);
		if (!(old = find(s, f1, f2)))
			continue;
		if (carried == 0 && old->state > full &&
		    (state = sluice_carry(&from[i], old->state, to, now_us)))
			carried = 1;
		sluice_shard_remove_at(s, (size_t)(old - s->slots));
	}
	if (carried == 1) {
		/* Removing may have moved the new bucket's slot. */
		if ((at = find(s, h1, h2)))
			at->state = state;
		else
			sluice_shard_insert(s, h1, h2, state, now_us, &h1, 1);
	}
	shard_unlock(s);
	return carried == 1;
}
