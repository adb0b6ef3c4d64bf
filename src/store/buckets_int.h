/*
 * buckets_int.h -- what the files of the bucket table share among
 * themselves (buckets.h is what the stores see):
 *
 *   buckets_table.c   slot arrays, the arena, placing, removing, growing
 *   buckets_lock.c    shard locks, robust-mutex recovery, repair, check
 *   buckets_expiry.c  expiry (reclaim) and eviction, inserting under the
 *                     bound
 *   buckets_take.c    single takes, takes of several keys one by one,
 *                     peek
 *   buckets_many.c    takes of several keys, all or nothing
 *   buckets_adjust.c  reset, refund, penalize, block, stats
 *   buckets_reserve.c reservations (a turn to wait for) and set
 *
 * The helpers every take runs (find, the lock's uncontended path, a
 * reclaim step) are static inline here, so that each take path compiles
 * with them in line as when the table was one file; only what was out of
 * line then (inserting, removing, a contended lock, reclaiming another
 * shard) is a call into another file.
 */
#ifndef SLUICE_STORE_BUCKETS_INT_H
#define SLUICE_STORE_BUCKETS_INT_H

#include "core/zone.h"
#include "store/buckets.h"
#include "util/aeshash.h"
#include "util/invariant.h"
#include "util/siphash.h"

#include <errno.h>

#define MIN_SLOTS	   16
#define EVICT_WINDOW	   32
#define EVICT_REACH	   (4 * EVICT_WINDOW)
#define RECLAIM_STEP	   2
#define RECLAIM_AWAY_EVERY 16
#define RECLAIM_AWAY	   32

/* A used slot's bucket is full at now_us (sluice_state_expiry_us() <=
 * now_us) when now_us >= 0 and its state is <= dead_from(now_us): no
 * division (it runs for every slot reclaiming examines).  A state's expiry
 * is ceil(state / 1000) (0 for state <= 0), at most INT64_MAX / 1000 + 1;
 * with now_us < 0 nothing is full. */
static inline int64_t dead_from(int64_t now_us)
{
	return now_us < 0		   ? 0
	       : now_us > INT64_MAX / 1000 ? INT64_MAX
					   : now_us * 1000;
}

/*
 * Slot writes mark the slot used (h1) last and free (h1 = 0) first, so a
 * process killed in the middle of one leaves at worst a stray or repeated
 * entry, which sluice_shard_repair() removes; never a used slot whose
 * identity is half written with the state of another.
 */
static inline void slot_clear(sluice_slot_t *sl)
{
	__atomic_store_n(&sl->h1, 0, __ATOMIC_RELEASE);
	sl->h2 = 0;
	sl->state = 0;
}

static inline void slot_put(sluice_slot_t *dst, const sluice_slot_t *src)
{
	dst->h2 = src->h2;
	dst->state = src->state;
	__atomic_store_n(&dst->h1, src->h1, __ATOMIC_RELEASE);
}

static inline sluice_slot_t *find(const sluice_shard_t *s, uint64_t h1,
				  uint64_t h2)
{
	size_t i = h1 & s->mask, n;
	sluice_slot_t *sl;

	for (n = 0; n <= s->mask && (sl = &s->slots[i])->h1 != 0; n++) {
		if (sl->h1 == h1 && sl->h2 == h2)
			return sl;
		i = (i + 1) & s->mask;
	}
	return NULL;
}

/* Puts sl in the first free slot from its home; NULL when there is none
 * (never in a table kept at most 3/4 full; a damaged shared one may be). */
static inline sluice_slot_t *place(sluice_slot_t *slots, size_t mask,
				   const sluice_slot_t *sl)
{
	size_t i = sl->h1 & mask, n;

	for (n = 0; slots[i].h1; n++) {
		if (n == mask)
			return NULL;
		i = (i + 1) & mask;
	}
	slot_put(&slots[i], sl);
	return &slots[i];
}

/* buckets_table.c */

/* Removes the key at slot i and shifts the following run back so that
 * linear probing still finds every key (no tombstones). */
void sluice_shard_remove_at(sluice_shard_t *s, size_t i);
/* Doubles the slot array; returns -1 (leaving the table as it was) when
 * out of memory or the array is fixed. */
int sluice_shard_grow(sluice_shard_t *s);

/* buckets_lock.c */

/* The shard of a key whose hash starts with h0: its top bits. */
static inline size_t shard_index(const sluice_buckets_t *m, uint64_t h0)
{
	size_t i = m->nshards > 1 ? (size_t)(h0 >> m->shift) : 0;

	SLUICE_ASSERT(m->nshards <= SLUICE_MAX_SHARDS && i < m->nshards);
	return i;
}

/* The shard of a key's hash. */
static inline sluice_shard_t *shard_of(sluice_buckets_t *m, const uint64_t h[2])
{
	return &m->shards[shard_index(m, h[0])];
}

/*
 * A shared lock's type lives in the file: one overwritten with another
 * type makes glibc take another path (priority inheritance: kernel calls
 * on garbage; lock elision: instructions this CPU may not have, SIGILL).
 * So a lock whose type changed is not locked at all, and a lock this
 * process holds gets its type back before it is unlocked.
 */
static inline int kind_changed(const sluice_shard_t *s)
{
#ifdef __GLIBC__
	return s->lock_kind && s->lock->__data.__kind != s->lock_kind;
#else
	(void)s;
	return 0;
#endif
}

static inline void shard_unlock(sluice_shard_t *s)
{
#ifdef __GLIBC__
	if (kind_changed(s))
		s->lock->__data.__kind = s->lock_kind;
#endif
	pthread_mutex_unlock(s->lock);
}

/* shard_lock() after its first trylock answered rc, unless that took the
 * lock with nothing more to do: spins, waits, recovers (buckets_lock.c). */
int sluice_shard_lock_rest(sluice_shard_t *s, int rc);

/* Takes a shard's lock: 0, or an error number (the lock is then not
 * held).  The uncontended path is one trylock. */
static inline int shard_lock(sluice_shard_t *s)
{
	int rc;

	if (kind_changed(s))
		return EINVAL;
	rc = pthread_mutex_trylock(s->lock);
	if (rc == 0 &&
	    !(s->wait_ms && __atomic_load_n(&s->stuck, __ATOMIC_RELAXED)))
		return 0;
	return sluice_shard_lock_rest(s, rc);
}

/* A trylock that recovers a lock whose holder died: 0 or an error
 * number. */
int sluice_shard_trylock(sluice_shard_t *s);

/* buckets_expiry.c */

/*
 * Asks the memory system for the lines that hold slots from .. from + n - 1
 * (cyclically), so that their misses overlap whatever comes before they
 * are read.  Without the shard's lock: the slot array and its size are
 * read atomically (sluice_shard_grow() replaces them under the lock) and a
 * prefetch of a stale address is only a wasted hint.
 */
static inline void prefetch_slots(const sluice_shard_t *s, uint64_t from,
				  size_t n)
{
	const sluice_slot_t *slots =
		__atomic_load_n(&s->slots, __ATOMIC_RELAXED);
	uint64_t mask = __atomic_load_n(&s->mask, __ATOMIC_RELAXED);
	size_t j;

	/* Every 64-byte line inside the run holds the start of every
	 * other slot (48 bytes apart); the last slot's end may lie alone in
	 * the line after. */
	for (j = 0; j < n; j += 2)
		__builtin_prefetch(&slots[(from + j) & mask], 1, 0);
	__builtin_prefetch((const char *)&slots[(from + n - 1) & mask] +
				   sizeof(sluice_slot_t) - 1,
			   1, 0);
}

/* The slot reclaim_step() looks at next (read without the lock for a
 * prefetch: the cursor is stored atomically). */
static inline uint64_t reclaim_cursor(const sluice_shard_t *s)
{
	return __atomic_load_n(&s->t->cursor, __ATOMIC_RELAXED);
}

static inline void set_cursor(sluice_shard_t *s, uint64_t at)
{
	__atomic_store_n(&s->t->cursor, at, __ATOMIC_RELAXED);
}

/* Examines up to steps slots at the shard's cursor, removing full
 * buckets; the caller holds the lock. */
static inline void reclaim_step(sluice_shard_t *s, int64_t now_us, int steps)
{
	/* The cursor is kept here and stored once (removing reads and
	 * moves neither it nor the array; the count is read again). */
	const sluice_slot_t *slots = s->slots;
	size_t mask = s->mask, i = s->t->cursor & mask;
	uint64_t count = s->t->count;
	const int64_t full = dead_from(now_us);
	const int some = now_us >= 0;
	int n, moved = 0;

	for (n = 0; n < steps && count > 0; n++) {
		/* One branch, not one on whether the slot is used: in a table
		 * half full that is a coin toss, and a mispredicted branch
		 * here throws away the work the processor had done ahead. */
		if ((slots[i].h1 != 0) & (slots[i].state <= full) & some) {
			/* remove_at may shift a live key into slot i: look
			 * at the same slot again next time. */
			sluice_shard_remove_at(s, i);
			s->t->expired++;
			count = s->t->count;
		} else {
			i = (i + 1) & mask;
			moved = 1;
		}
	}
	if (moved)
		set_cursor(s, i);
}

/* now_us as sluice_eval() sees it. */
static inline int64_t clamp_now(int64_t now_us)
{
	return now_us < 0		     ? 0
	       : now_us > SLUICE_TIME_MAX_US ? SLUICE_TIME_MAX_US
					     : now_us;
}

/* Every RECLAIM_AWAY_EVERY calls of a thread, after its own shard is
 * unlocked, sweeps part of another shard (round-robin; skipped when
 * busy). */
void sluice_buckets_reclaim_elsewhere(sluice_buckets_t *m, int64_t now_us);

/* Stores the state of a bucket that has none yet, evicting first when the
 * shard is at its bound (never one of keep, the current call's buckets).
 * On allocation failure the decision stands but the state is not kept
 * (fails open, never crashes). */
void sluice_shard_insert(sluice_shard_t *s, uint64_t h1, uint64_t h2,
			 sluice_state_t state, int64_t now_us,
			 const uint64_t *keep, size_t nkeep);

/* A call's buckets (their identity: buckets_table.c's header comment). */

/*
 * Ad-hoc buckets (a key starting with SLUICE_KEY_ADHOC: limits its caller
 * chose) carry a mark in the top 11 bits of their identity's second word,
 * above every bit a limit's interval (< 2^53) can flip, so that eviction
 * tells them apart from the slot alone (buckets_expiry.c).  The mark
 * replaces 11 bits of the key's hash: an ad-hoc bucket is named by 117
 * bits, still far from any chance collision.  Rule buckets keep their
 * whole hash (the same identity as every earlier build, so a shared file
 * keeps them through an upgrade); one in 2048 of them happens to carry the
 * mark and is evicted among the ad-hoc buckets (which ones depends on the
 * table's secret).
 */
#define ADHOC_SHIFT 53
#define ADHOC_MASK  (~(uint64_t)0 << ADHOC_SHIFT)
#define ADHOC_MARK  ((uint64_t)0x51e << ADHOC_SHIFT)

static inline int key_adhoc(const void *key, size_t len)
{
	return len > 0 && *(const unsigned char *)key == SLUICE_KEY_ADHOC;
}

static inline int slot_adhoc(const sluice_slot_t *sl)
{
	return (sl->h2 & ADHOC_MASK) == ADHOC_MARK;
}

/* Marks the hash of an ad-hoc key. */
static inline void mark_class(const void *key, size_t len, uint64_t h[2])
{
	if (key_adhoc(key, len))
		h[1] = (h[1] & ~ADHOC_MASK) | ADHOC_MARK;
}

/* A key's 128-bit keyed hash, the identity its buckets start from: the
 * table's AES hash for a key it takes (util/aeshash.h), else SipHash;
 * marked when the key is ad-hoc. */
static inline void key_hash(const sluice_buckets_t *m, const void *key,
			    size_t len, uint64_t h[2])
{
	if (m->aes && len <= SLUICE_AESHASH_MAX)
		sluice_aeshash(m->aes, key, len, h);
	else
		sluice_siphash13_128(m->seed, key, len, h);
	mark_class(key, len, h);
}

/*
 * A bucket's identity: the key's hash XORed with the limit's exact value.
 * capacity <= 2^52 and per < 2^10 fill 63 bits of the first word, interval
 * <= 2^52 the second: distinct limits (in lowest terms, as
 * sluice_limit_init() keeps them) give distinct identities for one key.
 *
 * A quota's sets the top bit of the first word, which no bucket's does,
 * over its quota (< 2^30), unit and alignment, and folds in the hash of
 * its zone's NAME (26 bits in the first word, 53 in the second, below the
 * ad-hoc mark): a zone's id is the order the process loaded it in, so
 * two processes on one shared file may give one zone two ids, or one id
 * to two zones; its name they agree on.
 */
static inline void quota_id(const uint64_t h[2], const sluice_limit_t *l,
			    uint64_t *h1, uint64_t *h2)
{
	const uint64_t zh = sluice_zone_hash(l->window.zone);

	*h1 = h[0] ^ (l->capacity | (uint64_t)l->window.per << 30 |
		      (uint64_t)l->window.align << 33 | (zh >> 38) << 37 |
		      (uint64_t)1 << 63);
	*h1 += !*h1; /* 0 marks an empty slot */
	*h2 = h[1] ^ (zh & ~ADHOC_MASK);
}

static inline void bucket_id(const uint64_t h[2], const sluice_limit_t *l,
			     uint64_t *h1, uint64_t *h2)
{
	if (__builtin_expect(l->window.per != 0, 0)) {
		quota_id(h, l, h1, h2);
		return;
	}
	*h1 = h[0] ^ (l->capacity | (uint64_t)l->rate.per << 53);
	*h1 += !*h1; /* 0 marks an empty slot */
	*h2 = h[1] ^ l->rate.interval;
}

/* 1 when bucket i of a call repeats an earlier one (the same limit given
 * twice is one bucket, charged once). */
static inline int seen_before(const uint64_t *h1, const uint64_t *h2, size_t i)
{
	size_t j;

	for (j = 0; j < i; j++)
		if (h1[j] == h1[i] && h2[j] == h2[i])
			return 1;
	return 0;
}

/* Checks a key's limits, hashes them into h1/h2 (one bucket each) and
 * locks the key's shard (buckets_adjust.c): 0 with *out set, SLUICE_EINVAL
 * or SLUICE_ESTORE (the lock). */
int sluice_buckets_lock_key(sluice_buckets_t *m, const void *key, size_t keylen,
			    const sluice_limit_t *limits, size_t nlimits,
			    uint64_t *h1, uint64_t *h2, sluice_shard_t **out);

#endif
