/*
 * buckets_reserve.c -- the bucket table's reservations (sluice_reserve_all()
 * on one key's buckets, under its shard's lock: a turn to wait for), their
 * conditional refund (sluice_refund_if()) and set (a bucket's remaining
 * tokens, sluice_set_remaining()).
 */
#include "store/buckets_int.h"

/*
 * Commits next[i] to each bucket of the locked shard s: in place first
 * (inserting may move slots), a repeated limit once, a full state in
 * place of an old one left for expiry to reclaim (removing here could
 * move the slot of a later limit).
 */
static void commit_states(sluice_shard_t *s, const uint64_t *h1,
			  const uint64_t *h2, sluice_slot_t *const *at,
			  const sluice_state_t *next, size_t nlimits,
			  int64_t now_us)
{
	size_t i;

	for (i = 0; i < nlimits; i++)
		if (at[i] && !seen_before(h1, h2, i))
			at[i]->state = next[i];
	for (i = 0; i < nlimits; i++)
		if (!at[i] && next[i] != 0 && !seen_before(h1, h2, i))
			sluice_shard_insert(s, h1[i], h2[i], next[i], now_us,
					    h1, nlimits);
}

int sluice_buckets_reserve(sluice_buckets_t *m, const void *key, size_t keylen,
			   const sluice_limit_t *limits, size_t nlimits,
			   uint64_t cost, uint64_t max_wait_us, int64_t now_us,
			   sluice_decision_t *summary, uint64_t *wait_us,
			   sluice_state_t *left)
{
	uint64_t h1[SLUICE_MAX_LIMITS], h2[SLUICE_MAX_LIMITS];
	sluice_slot_t *at[SLUICE_MAX_LIMITS];
	sluice_state_t cur[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
	sluice_shard_t *s;
	size_t i;
	int ok, rc = sluice_buckets_lock_key(m, key, keylen, limits, nlimits,
					     h1, h2, &s);

	if (rc != 0)
		return rc;
	for (i = 0; i < nlimits; i++) {
		at[i] = find(s, h1[i], h2[i]);
		cur[i] = at[i] ? at[i]->state : 0;
	}
	ok = sluice_reserve_all(limits, cur, nlimits, now_us, cost, max_wait_us,
				next, summary, wait_us);
	if (ok)
		commit_states(s, h1, h2, at, next, nlimits, now_us);
	shard_unlock(s);
	/* What a conditional refund expects: the states as committed (a
	 * repeated limit's next is its first's). */
	for (i = 0; left && i < nlimits; i++)
		left[i] = ok && cost > 0 ? next[i] : 0;
	return ok;
}

int sluice_buckets_refund_if(sluice_buckets_t *m, const void *key,
			     size_t keylen, const sluice_limit_t *limits,
			     size_t nlimits, uint64_t cost,
			     const sluice_state_t *expected, int64_t now_us)
{
	uint64_t h1[SLUICE_MAX_LIMITS], h2[SLUICE_MAX_LIMITS];
	sluice_slot_t *at[SLUICE_MAX_LIMITS];
	sluice_state_t cur[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
	sluice_shard_t *s;
	size_t i;
	int ok, rc;

	if (!expected)
		return SLUICE_EINVAL;
	rc = sluice_buckets_lock_key(m, key, keylen, limits, nlimits, h1, h2,
				     &s);
	if (rc != 0)
		return rc;
	for (i = 0; i < nlimits; i++) {
		at[i] = find(s, h1[i], h2[i]);
		cur[i] = at[i] ? at[i]->state : 0;
	}
	ok = sluice_refund_if(limits, cur, expected, nlimits, now_us, cost,
			      next);
	/* Refunded buckets keep their slot, full or not (as
	 * sluice_buckets_refund()): expiry reclaims a full one.  A bucket
	 * with no slot held 0, so it expected 0 and stays full. */
	for (i = 0; ok && i < nlimits; i++)
		if (at[i] && !seen_before(h1, h2, i))
			at[i]->state = next[i];
	shard_unlock(s);
	return ok;
}

int sluice_buckets_set(sluice_buckets_t *m, const void *key, size_t keylen,
		       const sluice_limit_t *limits, size_t nlimits,
		       uint64_t remaining, int64_t now_us)
{
	uint64_t h1[SLUICE_MAX_LIMITS], h2[SLUICE_MAX_LIMITS];
	sluice_slot_t *at[SLUICE_MAX_LIMITS];
	sluice_state_t next[SLUICE_MAX_LIMITS];
	sluice_shard_t *s;
	size_t i;
	int rc = sluice_buckets_lock_key(m, key, keylen, limits, nlimits, h1,
					 h2, &s);

	if (rc != 0)
		return rc;
	for (i = 0; i < nlimits; i++) {
		at[i] = find(s, h1[i], h2[i]);
		next[i] = sluice_set_remaining(&limits[i], now_us, remaining);
	}
	commit_states(s, h1, h2, at, next, nlimits, now_us);
	shard_unlock(s);
	return 0;
}
