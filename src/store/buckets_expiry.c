/*
 * buckets_expiry.c -- expiry and eviction in the bucket table: the bound
 * on a shard's buckets, what an insert into a full shard evicts, and the
 * reclaiming of full buckets spread over the traffic (a step of it runs in
 * line in every take: reclaim_step(), buckets_int.h).
 *
 * Bound.  Each shard holds at most its share of max_keys buckets (the
 * shares add up to max_keys exactly).  A full shard evicts before
 * inserting, what loses least: a full bucket (its state expired: forgetting
 * it loses nothing), else the bucket nearest to full, the one whose state
 * expires first (the smallest debt, in time to full), among EVICT_WINDOW
 * buckets of the new bucket's kind from a hand that moves on with each
 * eviction.  So a flood of fresh keys, each in debt by one request, evicts
 * other fresh keys, and a drained bucket goes only when every bucket
 * examined is in deeper debt (in a shard of fresh keys and a few drained
 * ones, never): eviction is no reset button.  A bounded window keeps an
 * eviction O(1).  Lossy evictions are counted, with the debt they forgave.
 *
 * Kinds.  Debt in time to full compares buckets of rates the operator set;
 * a caller who picks its own rate (an ad-hoc bucket: POST /v1/take, key
 * SLUICE_KEY_ADHOC) could otherwise make every bucket it mints look deeper
 * in debt than anyone's ("capacity 1, 1/day": a day of debt each) and so
 * have eviction pick a drained rule bucket.  No measure on a bucket's state
 * alone can tell the two apart (a capacity-1 bucket after one request is as
 * drained as a drained rule bucket, whatever the measure), so the kinds
 * are not compared: an ad-hoc insert evicts the nearest-to-full ad-hoc
 * bucket within reach (EVICT_REACH buckets examined at most), and a rule
 * bucket only when none is within reach (a table of rule buckets: the
 * ad-hoc ones then gain a slot per eviction until about one bucket in
 * EVICT_REACH is theirs); a rule insert evicts the nearest-to-full ad-hoc
 * bucket within reach first, else the nearest-to-full rule bucket.  So no
 * flood, of either kind and any rate, resets a rule bucket while an ad-hoc
 * bucket is within reach, and among rule buckets the rule above holds.
 * What is given away is the ad-hoc buckets' state: under pressure they
 * give way to rule buckets, and among themselves they are compared in
 * time to full at rates their callers chose (one caller's slow ad-hoc
 * buckets can evict another's drained one).  docs/CONFIG.md says so; every
 * lossy eviction is counted, with the debt it forgave.
 *
 * Expiry.  A state is dead once its bucket is full again.  There is no
 * background thread and no stop-the-world scan: every call also examines
 * RECLAIM_STEP slots at its shard's cursor, and every RECLAIM_AWAY_EVERY-th
 * call of a thread sweeps RECLAIM_AWAY slots of another shard (if its lock
 * is free), so shards that traffic no longer reaches are emptied too.  The
 * cost of reclaiming is spread evenly over the traffic.
 */
#include "store/buckets_int.h"
#include "util/invariant.h"

/* 1 when h1 is one of the buckets the current call is writing. */
static int busy(uint64_t h1, const uint64_t *keep, size_t nkeep)
{
	size_t i;

	for (i = 0; i < nkeep; i++)
		if (keep[i] == h1)
			return 1;
	return 0;
}

/*
 * Frees one slot to make room (the shard is at its bound, so not empty):
 * the first full bucket found, else the ad-hoc bucket nearest to full
 * (earliest expiry: the least debt) among EVICT_WINDOW ad-hoc buckets from
 * the hand, else (none of them within EVICT_REACH buckets) the rule bucket
 * nearest to full among those examined; for a rule insert (adhoc 0) the
 * same, with rule buckets examined up to EVICT_WINDOW only.  The buckets of
 * the current call (keep) are never chosen.  Debt is compared in time to
 * full, which orders buckets the same way at any instant.  Returns -1 when
 * the shard holds nothing else (a shard smaller than one call's limits).
 */
static int evict_one(sluice_shard_t *s, int64_t now_us, const uint64_t *keep,
		     size_t nkeep, int adhoc)
{
	/* States order as their expiries do, and a state is full at now_us
	 * iff it is <= now_us * 1000: compare states, no division. */
	const sluice_state_t full = clamp_now(now_us) * 1000;
	size_t i = s->t->hand & s->mask, seen = 0, nadhoc = 0, nrule = 0;
	size_t scanned = 0;
	sluice_state_t best[2] = {INT64_MAX, INT64_MAX}; /* rule, ad-hoc */
	long victim[2] = {-1, -1};
	int kind;

	for (; scanned <= s->mask && nadhoc < EVICT_WINDOW &&
	       seen < EVICT_REACH && (adhoc || nrule < EVICT_WINDOW);
	     i = (i + 1) & s->mask, scanned++) {
		sluice_slot_t *sl = &s->slots[i];

		if (!sl->h1 || (nkeep > 1 && busy(sl->h1, keep, nkeep)))
			continue;
		seen++;
		if (sl->state <= full) {
			sluice_shard_remove_at(s, i);
			s->t->evicted_full++;
			s->t->hand = i;
			return 0;
		}
		kind = slot_adhoc(sl);
		if (kind)
			nadhoc++;
		else
			nrule++;
		if (sl->state < best[kind]) {
			best[kind] = sl->state;
			victim[kind] = (long)i;
		}
	}
	/* Ad-hoc first, for either kind of insert; a rule bucket only when
	 * none is within reach. */
	kind = victim[1] >= 0 ? 1 : 0;
	if (victim[kind] < 0)
		return -1; /* only this call's buckets */
	sluice_shard_remove_at(s, (size_t)victim[kind]);
	s->t->evicted_lossy++;
	s->t->evicted_debt_us +=
		(uint64_t)(sluice_state_expiry_us(best[kind]) - full / 1000);
	s->t->hand = i;
	return 0;
}

/* Reclaiming elsewhere is shared out by a per-thread call counter. */
static __thread unsigned reclaim_tick;

/* The sweep of sluice_buckets_reclaim_elsewhere() (out of line: the
 * calls that only count stay a few instructions). */
static __attribute__((noinline)) void
reclaim_elsewhere_sweep(sluice_buckets_t *m, unsigned tick, int64_t now_us)
{
	sluice_shard_t *s =
		&m->shards[(tick / RECLAIM_AWAY_EVERY) & (m->nshards - 1)];

	if (sluice_shard_trylock(s) != 0)
		return;
	reclaim_step(s, now_us, RECLAIM_AWAY);
	shard_unlock(s);
}

/* Every RECLAIM_AWAY_EVERY calls, after its own shard is unlocked, a thread
 * sweeps part of another shard (round-robin; skipped when busy).  The call
 * before asks for the lines that sweep will read (RECLAIM_AWAY slots at
 * that shard's cursor: a dozen lines nobody touched lately), so that they
 * arrive while that call and the next one's own miss are waited for,
 * instead of one after another inside the sweep. */
void sluice_buckets_reclaim_elsewhere(sluice_buckets_t *m, int64_t now_us)
{
	unsigned tick;

	if (m->nshards < 2)
		return;
	tick = ++reclaim_tick;
	if (tick % RECLAIM_AWAY_EVERY == 0) {
		reclaim_elsewhere_sweep(m, tick, now_us);
	} else if (tick % RECLAIM_AWAY_EVERY == RECLAIM_AWAY_EVERY - 1) {
		const sluice_shard_t *s =
			&m->shards[((tick + 1) / RECLAIM_AWAY_EVERY) &
				   (m->nshards - 1)];

		prefetch_slots(s, reclaim_cursor(s), RECLAIM_AWAY);
	}
}

/* Stores the state of a bucket that has none yet.  On allocation failure
 * the decision stands but the state is not kept (fails open, never
 * crashes). */
void sluice_shard_insert(sluice_shard_t *s, uint64_t h1, uint64_t h2,
			 sluice_state_t state, int64_t now_us,
			 const uint64_t *keep, size_t nkeep)
{
	sluice_slot_t sl;

	if (s->t->count >= s->max &&
	    evict_one(s, now_us, keep, nkeep,
		      (h2 & ADHOC_MASK) == ADHOC_MARK) != 0) {
		/* No room but this call's own buckets: drop this state (the
		 * bound holds; the bucket restarts full, counted as lost). */
		s->t->evicted_lossy++;
		s->t->evicted_debt_us +=
			(uint64_t)(sluice_state_expiry_us(state) -
				   clamp_now(now_us));
		return;
	}
	if ((s->t->count + 1) * 4 > (s->mask + 1) * 3 &&
	    sluice_shard_grow(s) != 0)
		return;
	sl.h1 = h1;
	sl.h2 = h2;
	sl.state = state;
	if (place(s->slots, s->mask, &sl))
		s->t->count++;
	/* A table this process owns stays within its bound and at most 3/4
	 * full (probes end); a shared one's count is the file's. */
	SLUICE_ASSERT(!s->can_grow || (s->t->count <= s->max &&
				       s->t->count * 4 <= (s->mask + 1) * 3));
}
