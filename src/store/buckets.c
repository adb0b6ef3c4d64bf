/*
 * buckets.c -- the bucket table of the local stores: the memory store
 * (memory.c, one process) and the shared-memory store (shm.c, every
 * process of a host).
 *
 * Identity.  A bucket is a key and one of its limits.  The key is known by
 * a 128-bit keyed hash (SipHash-1-3-128 under a secret drawn at creation)
 * instead of its bytes, and the bucket by that hash XORed with the limit's
 * exact value (capacity, interval, per: they pack into 127 bits, so two
 * limits of one key never share a bucket).  A bucket is never identified
 * by the limit's position among the key's limits: a client that switches
 * tiers, or a rule that gains or loses a limit, finds every remaining
 * limit's state where it was.  Without the secret nobody can find two keys
 * with the same identity, and by chance two of a billion buckets share one
 * with probability below 2^-66; in exchange the table needs no key bytes,
 * and a decision touches one table slot per limit and nothing else.
 *
 * Layout.  The table is split into shards (a power of two, up to 64; fewer
 * for a small max_keys, so that each has room for 2 * SLUICE_MAX_LIMITS
 * buckets), each with its own mutex, so concurrent callers on different
 * keys rarely meet.
 * A key's shard comes from the top bits of its hash (before the limit is
 * mixed in: every limit of a key lives in one shard, charged under one
 * lock), a bucket's home slot from the low bits.  A shard is an
 * open-addressing table (linear probing, backward-shift deletion, at most
 * 3/4 full) of 24-byte slots: the identity and the state.  That is 32 to 64
 * bytes per bucket (a key with n limits has n buckets), whatever the key's
 * length.
 *
 * Bound.  Each shard holds at most its share of max_keys buckets (the
 * shares add up to max_keys exactly).  A full shard evicts before
 * inserting, what loses least: a full bucket (its state expired: forgetting
 * it loses nothing), else the bucket nearest to full, the one whose state
 * expires first (the smallest debt, in time to full), among EVICT_WINDOW
 * buckets from a hand that moves on with each eviction (the whole shard
 * when it holds no more).  So a flood of fresh keys, each in debt by one
 * request, evicts other fresh keys, and a drained bucket goes only when
 * every bucket examined is in deeper debt (in a shard of fresh keys and a
 * few drained ones, never): eviction is no reset button.  A bounded window
 * keeps an eviction O(1).  Lossy evictions are counted, with the debt they
 * forgave.
 *
 * Expiry.  A state is dead once its bucket is full again.  There is no
 * background thread and no stop-the-world scan: every call also examines
 * RECLAIM_STEP slots at its shard's cursor, and every RECLAIM_AWAY_EVERY-th
 * call of a thread sweeps RECLAIM_AWAY slots of another shard (if its lock
 * is free), so shards that traffic no longer reaches are emptied too.  The
 * cost of reclaiming is spread evenly over the traffic.
 */
#include "store/buckets.h"
#include "util/siphash.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MIN_SLOTS	   16
#define EVICT_WINDOW	   32
#define RECLAIM_STEP	   2
#define RECLAIM_AWAY_EVERY 16
#define RECLAIM_AWAY	   32

/* 1 when the slot's bucket is full at now_us: sluice_state_expiry_us()
 * <= now_us, without its division (it runs for every slot reclaiming
 * examines).  A state's expiry is ceil(state / 1000) (0 for state <= 0),
 * at most INT64_MAX / 1000 + 1. */
static int slot_dead(const sluice_slot_t *sl, int64_t now_us)
{
	if (now_us < 0)
		return 0;
	if (now_us > INT64_MAX / 1000)
		return 1;
	return sl->state <= now_us * 1000;
}

/* ------------------------------------------------------------- the table */

/*
 * Slot arrays of 2 MiB and more are mapped directly and offered huge pages:
 * a random probe into a large table otherwise costs a TLB miss (a page walk
 * through memory) on top of the cache miss on the slot itself.
 */
#define HUGE_BYTES ((size_t)2 << 20)

sluice_slot_t *sluice_slots_alloc(size_t n)
{
	size_t bytes = n * sizeof(sluice_slot_t);
	void *p;

	if (bytes < HUGE_BYTES)
		return calloc(n, sizeof(sluice_slot_t));
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	madvise(p, bytes, MADV_HUGEPAGE); /* a hint; fine if refused */
	return p;
}

void sluice_slots_free(sluice_slot_t *slots, size_t n)
{
	if (n * sizeof(sluice_slot_t) < HUGE_BYTES)
		free(slots);
	else if (slots)
		munmap(slots, n * sizeof(sluice_slot_t));
}

/* The arena's region for arrays of n slots, or -1. */
static long arena_region(const sluice_arena_t *a, size_t n)
{
	size_t g;

	if (!a || !a->base || n < a->from || (n & (n - 1)) != 0)
		return -1;
	g = (size_t)(__builtin_ctzll(n) - __builtin_ctzll(a->from));
	return g < a->sizes ? (long)g : -1;
}

void sluice_arena_init(sluice_arena_t *a, size_t nshards, size_t max_slots)
{
	size_t from = 1, off = 0, g;
	char *p;

	memset(a, 0, sizeof(*a));
	while (nshards * from * sizeof(sluice_slot_t) < HUGE_BYTES)
		from *= 2;
	if (nshards < 2 || from > max_slots)
		return;
	for (g = 0; g < SLUICE_ARENA_SIZES && (from << g) <= max_slots; g++) {
		size_t region = nshards * (from << g) * sizeof(sluice_slot_t);

		a->off[g] = off;
		/* Regions start on a huge page (region sizes are multiples
		 * of one). */
		off += (region + HUGE_BYTES - 1) & ~(HUGE_BYTES - 1);
	}
	/* One huge page more, to align the start. */
	p = mmap(NULL, off + HUGE_BYTES, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return;
	a->base = (char *)(((uintptr_t)p + HUGE_BYTES - 1) &
			   ~(uintptr_t)(HUGE_BYTES - 1));
	if (a->base > p)
		munmap(p, (size_t)(a->base - p));
	munmap(a->base + off, HUGE_BYTES - (size_t)(a->base - p));
	madvise(a->base, off, MADV_HUGEPAGE); /* a hint; fine if refused */
	a->bytes = off;
	a->nshards = nshards;
	a->from = from;
	a->sizes = g;
}

void sluice_arena_free(sluice_arena_t *a)
{
	if (a->base)
		munmap(a->base, a->bytes);
	a->base = NULL;
}

sluice_slot_t *sluice_shard_slots_alloc(sluice_shard_t *s, size_t n)
{
	long g = arena_region(s->arena, n);

	if (g < 0)
		return sluice_slots_alloc(n);
	/* Each (size, shard) array is handed out once (tables only grow),
	 * so it is still as mmap() zeroed it. */
	return (sluice_slot_t *)(s->arena->base + s->arena->off[g]) +
	       s->index * n;
}

void sluice_shard_slots_free(sluice_shard_t *s, sluice_slot_t *slots, size_t n)
{
	long g = arena_region(s->arena, n);
	uintptr_t lo, hi, page = 4096;

	if (g < 0) {
		sluice_slots_free(slots, n);
		return;
	}
	/* The pages only this array covers go back to the system. */
	lo = ((uintptr_t)slots + page - 1) & ~(page - 1);
	hi = ((uintptr_t)(slots + n)) & ~(page - 1);
	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/*
 * Slot writes mark the slot used (h1) last and free (h1 = 0) first, so a
 * process killed in the middle of one leaves at worst a stray or repeated
 * entry, which sluice_shard_repair() removes; never a used slot whose
 * identity is half written with the state of another.
 */
static void slot_clear(sluice_slot_t *sl)
{
	__atomic_store_n(&sl->h1, 0, __ATOMIC_RELEASE);
	sl->h2 = 0;
	sl->state = 0;
}

static void slot_put(sluice_slot_t *dst, const sluice_slot_t *src)
{
	dst->h2 = src->h2;
	dst->state = src->state;
	__atomic_store_n(&dst->h1, src->h1, __ATOMIC_RELEASE);
}

/* Removes the key at slot i and shifts the following run back so that
 * linear probing still finds every key (no tombstones). */
static void remove_at(sluice_shard_t *s, size_t i)
{
	size_t j = i;

	slot_clear(&s->slots[i]);
	s->t->count--;
	/* Bounded by the table's size: a shared table may have been filled
	 * (damaged) so that no slot is empty. */
	for (size_t n = 0; n < s->mask; n++) {
		size_t home;

		j = (j + 1) & s->mask;
		if (!s->slots[j].h1)
			return;
		home = s->slots[j].h1 & s->mask;
		/* Move slot j into the hole unless its home lies cyclically
		 * in (i, j], where it can still be found without passing i. */
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			slot_put(&s->slots[i], &s->slots[j]);
			slot_clear(&s->slots[j]);
			i = j;
		}
	}
}

/* Puts sl in the first free slot from its home; NULL when there is none
 * (never in a table kept at most 3/4 full; a damaged shared one may be). */
static sluice_slot_t *place(sluice_slot_t *slots, size_t mask,
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

/* Doubles the slot array; returns -1 (leaving the table as it was) when out
 * of memory. */
static int grow(sluice_shard_t *s)
{
	size_t old = s->mask + 1, i;
	sluice_slot_t *next;

	if (!s->can_grow)
		return -1;
	next = sluice_shard_slots_alloc(s, old * 2);
	if (!next)
		return -1;
	for (i = 0; i < old; i++)
		if (s->slots[i].h1)
			place(next, old * 2 - 1, &s->slots[i]);
	sluice_shard_slots_free(s, s->slots, old);
	/* Atomic: prefetch_home() reads both without the lock. */
	__atomic_store_n(&s->slots, next, __ATOMIC_RELAXED);
	__atomic_store_n(&s->mask, old * 2 - 1, __ATOMIC_RELAXED);
	s->t->mask = s->mask;
	s->t->hand &= s->mask;
	s->t->cursor &= s->mask;
	return 0;
}

static sluice_slot_t *find(const sluice_shard_t *s, uint64_t h1, uint64_t h2)
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

/* ------------------------------------------------ locking and recovery */

/*
 * A shard's lock may be a robust process-shared mutex (the shared-memory
 * store): when its holder died, the next locker gets EOWNERDEAD and the
 * shard may be half updated.  Each state is one aligned 64-bit store, so no
 * state is ever torn; what a death can leave is a slot move or removal cut
 * short (an entry twice, or in a slot probing cannot reach) and a count
 * that is off.  sluice_shard_repair() makes every entry reachable again in
 * place, then the lock is marked consistent.  A death between two limits'
 * writes of one take leaves that take charged on some of its limits only: more
 * debt, never less, for a request that got no answer.
 */
static int shard_recover(sluice_shard_t *s)
{
	sluice_shard_repair(s);
	s->t->recovered++;
	return pthread_mutex_consistent(s->lock);
}

/*
 * Takes a shard's lock: 0, or an error number (the lock is then not held).
 * A shared lock lives in a file another process may have damaged or may
 * hold forever (stopped, or a lock word that names no live thread): after
 * wait_ms the caller gets ETIMEDOUT and a store error, never a hang.  The
 * uncontended path is one trylock, as before.
 *
 * The wait is cut into slices of LOCK_SLICE_MS, each its own timed lock:
 * a process killed inside pthread_mutex_unlock(), after it cleared the
 * lock word and before it woke a waiter, leaves that waiter asleep on a
 * free lock (the kernel's robust-list cleanup sees no owner to clean up,
 * and the next holder's unlock finds no waiter bit).  The next slice finds
 * the lock free, so a lost wakeup costs one slice, not the call.
 */
#define LOCK_SLICE_MS 20

static void realtime_after_ms(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static int64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* pthread_mutex_timedlock() for wait_ms in all, slice by slice. */
static int timedlock_sliced(pthread_mutex_t *lock, unsigned wait_ms)
{
	int64_t end = monotonic_ms() + wait_ms, left = wait_ms;
	struct timespec ts;
	int rc;

	for (;;) {
		realtime_after_ms(&ts, left < LOCK_SLICE_MS ? (unsigned)left
							    : LOCK_SLICE_MS);
		rc = pthread_mutex_timedlock(lock, &ts);
		if (rc != ETIMEDOUT || (left = end - monotonic_ms()) <= 0)
			return rc;
	}
}
/*
 * A shared lock's type lives in the file: one overwritten with another
 * type makes glibc take another path (priority inheritance: kernel calls
 * on garbage; lock elision: instructions this CPU may not have, SIGILL).
 * So a lock whose type changed is not locked at all, and a lock this
 * process holds gets its type back before it is unlocked.
 */
static int kind_changed(const sluice_shard_t *s)
{
#ifdef __GLIBC__
	return s->lock_kind && s->lock->__data.__kind != s->lock_kind;
#else
	(void)s;
	return 0;
#endif
}

static void shard_unlock(sluice_shard_t *s)
{
#ifdef __GLIBC__
	if (kind_changed(s))
		s->lock->__data.__kind = s->lock_kind;
#endif
	pthread_mutex_unlock(s->lock);
}

/*
 * How many more times a busy lock is tried before the caller sleeps on
 * it.  A critical section is a few dozen nanoseconds, while sleeping on a
 * busy lock and being woken costs both sides a system call (microseconds):
 * two processes on one shared file, or two threads, deciding random keys
 * meet on a shard now and then, and a short wait for the holder to finish
 * is far cheaper.  Bounded (8 x 16 pauses: a few microseconds at most),
 * for a holder that lost its core.
 */
#define LOCK_SPINS 8

/* A moment's wait for a busy lock: its word is only read (a trylock
 * would take its cache line from the holder, who needs it to unlock)
 * until it looks free, for at most a few dozen pauses. */
static void lock_pause(const sluice_shard_t *s)
{
	int n;

	for (n = 0; n < 16; n++) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
#ifdef __GLIBC__
		if (__atomic_load_n(&s->lock->__data.__lock,
				    __ATOMIC_RELAXED) == 0)
			return;
#endif
	}
	(void)s;
}

static int shard_lock(sluice_shard_t *s)
{
	int rc, spins;

	if (kind_changed(s))
		return EINVAL;
	rc = pthread_mutex_trylock(s->lock);
	for (spins = 0; rc == EBUSY && spins < LOCK_SPINS; spins++) {
		lock_pause(s);
		rc = pthread_mutex_trylock(s->lock);
	}
	/* Once a wait timed out, the shard's lock fails at once while it
	 * stays busy (a loop thread must not stall the whole wait per request
	 * on a lock nobody releases); the first success ends that. */
	if (rc == EBUSY && s->wait_ms &&
	    __atomic_load_n(&s->stuck, __ATOMIC_RELAXED))
		return ETIMEDOUT;
	if (rc == EBUSY) {
		if (s->wait_ms) {
			rc = timedlock_sliced(s->lock, s->wait_ms);
			if (rc == ETIMEDOUT)
				__atomic_store_n(&s->stuck, 1,
						 __ATOMIC_RELAXED);
		} else {
			rc = pthread_mutex_lock(s->lock);
		}
	}
	if (rc == EOWNERDEAD)
		rc = shard_recover(s);
	if (rc == 0 && s->wait_ms &&
	    __atomic_load_n(&s->stuck, __ATOMIC_RELAXED))
		__atomic_store_n(&s->stuck, 0, __ATOMIC_RELAXED);
	return rc;
}

/* The shard of a key whose hash starts with h0: its top bits. */
static size_t shard_index(const sluice_buckets_t *m, uint64_t h0)
{
	size_t i = m->nshards > 1 ? (size_t)(h0 >> m->shift) : 0;

	assert(m->nshards <= SLUICE_MAX_SHARDS && i < m->nshards);
	return i;
}

static int shard_trylock(sluice_shard_t *s)
{
	int rc;

	if (kind_changed(s))
		return EINVAL;
	rc = pthread_mutex_trylock(s->lock);

	if (rc == EOWNERDEAD)
		rc = shard_recover(s);
	return rc;
}

/*
 * Makes every entry reachable again, in place.  Each step copies before it
 * clears (place() writes the copy, then the original is cleared; a
 * duplicate keeps the deeper debt before the other is cleared), so a
 * repairer killed midway leaves every entry in the table, at worst twice,
 * for the next locker to repair: a charge is never lost.  An entry probing
 * cannot reach has an empty slot between its home and itself, where
 * place() puts it; clearing a slot can cut a later entry off, which the
 * same or the next pass moves in turn.
 */
void sluice_shard_repair(sluice_shard_t *s)
{
	size_t i, size = s->mask + 1, pass, used = 0;
	int moved = 1;

	for (pass = 0; moved && pass < size; pass++) {
		moved = 0;
		for (i = 0; i < size; i++) {
			sluice_slot_t *sl = &s->slots[i], *f;

			if (!sl->h1 || (f = find(s, sl->h1, sl->h2)) == sl)
				continue;
			if (!f && !place(s->slots, s->mask, sl))
				continue; /* no free slot: leave it */
			if (f && sl->state > f->state)
				f->state = sl->state; /* never forgive */
			slot_clear(sl);
			moved = 1;
		}
	}
	for (i = 0; i < size; i++)
		used += s->slots[i].h1 != 0;
	s->t->count = used;
	s->t->hand &= s->mask;
	s->t->cursor &= s->mask;
}

int sluice_shard_check(sluice_shard_t *s, char *err, size_t errlen)
{
	size_t i, used = 0;
	int rc;

	if ((rc = shard_lock(s)) != 0) {
		snprintf(err, errlen, "its lock cannot be taken: %s",
			 rc == ETIMEDOUT ? "held and not released within "
					   "the wait (a stopped process, or "
					   "damaged)"
					 : strerror(rc));
		return -1;
	}
	for (i = 0; i <= s->mask; i++) {
		sluice_slot_t *sl = &s->slots[i];

		if (!sl->h1)
			continue;
		used++;
		/* Reachable from its home, and the first of its identity. */
		if (find(s, sl->h1, sl->h2) != sl) {
			snprintf(err, errlen,
				 "slot %zu is unreachable or "
				 "repeated",
				 i);
			shard_unlock(s);
			return -1;
		}
	}
	if (used != s->t->count || used > s->max) {
		snprintf(err, errlen, "%zu slots used, count %llu, max %llu",
			 used, (unsigned long long)s->t->count,
			 (unsigned long long)s->max);
		shard_unlock(s);
		return -1;
	}
	shard_unlock(s);
	return 0;
}

/* --------------------------------------------------- expiry and eviction */

static void reclaim_step(sluice_shard_t *s, int64_t now_us, int steps)
{
	int n;

	for (n = 0; n < steps && s->t->count > 0; n++) {
		size_t i = s->t->cursor & s->mask;

		if (s->slots[i].h1 && slot_dead(&s->slots[i], now_us)) {
			/* remove_at may shift a live key into slot i: look
			 * at the same slot again next time. */
			remove_at(s, i);
			s->t->expired++;
		} else {
			s->t->cursor = (i + 1) & s->mask;
		}
	}
}

/* now_us as sluice_eval() sees it. */
static int64_t clamp_now(int64_t now_us)
{
	return now_us < 0		     ? 0
	       : now_us > SLUICE_TIME_MAX_US ? SLUICE_TIME_MAX_US
					     : now_us;
}

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
 * the first full bucket found, else the bucket nearest to full (earliest
 * expiry: the least debt) among EVICT_WINDOW buckets from the hand.  The
 * buckets of the current call (keep) are never chosen.  Debt is compared
 * in time to full, which orders buckets the same way at any instant.
 * Returns -1 when the shard holds nothing else (a shard smaller than one
 * call's limits).
 */
static int evict_one(sluice_shard_t *s, int64_t now_us, const uint64_t *keep,
		     size_t nkeep)
{
	/* States order as their expiries do, and a state is full at now_us
	 * iff it is <= now_us * 1000: compare states, no division. */
	const sluice_state_t full = clamp_now(now_us) * 1000;
	size_t i = s->t->hand & s->mask, seen = 0, scanned = 0;
	sluice_state_t best = INT64_MAX;
	long victim = -1;

	for (; scanned <= s->mask && seen < EVICT_WINDOW;
	     i = (i + 1) & s->mask, scanned++) {
		sluice_slot_t *sl = &s->slots[i];

		if (!sl->h1 || (nkeep > 1 && busy(sl->h1, keep, nkeep)))
			continue;
		seen++;
		if (sl->state <= full) {
			remove_at(s, i);
			s->t->evicted_full++;
			s->t->hand = i;
			return 0;
		}
		if (sl->state < best) {
			best = sl->state;
			victim = (long)i;
		}
	}
	if (victim < 0)
		return -1; /* only this call's buckets */
	remove_at(s, (size_t)victim);
	s->t->evicted_lossy++;
	s->t->evicted_debt_us +=
		(uint64_t)(sluice_state_expiry_us(best) - full / 1000);
	s->t->hand = i;
	return 0;
}

/* Reclaiming elsewhere is shared out by a per-thread call counter. */
static __thread unsigned reclaim_tick;

/* Every RECLAIM_AWAY_EVERY calls, after its own shard is unlocked, a thread
 * sweeps part of another shard (round-robin; skipped when busy). */
static void reclaim_elsewhere(sluice_buckets_t *m, int64_t now_us)
{
	sluice_shard_t *s;

	if (m->nshards < 2 || ++reclaim_tick % RECLAIM_AWAY_EVERY != 0)
		return;
	s = &m->shards[(reclaim_tick / RECLAIM_AWAY_EVERY) & (m->nshards - 1)];
	if (shard_trylock(s) != 0)
		return;
	reclaim_step(s, now_us, RECLAIM_AWAY);
	shard_unlock(s);
}

/* ------------------------------------------------------------ public API */

size_t sluice_buckets_nshards(size_t max_keys, unsigned *bits)
{
	size_t n = 1;

	*bits = 0;
	while (n < SLUICE_MAX_SHARDS &&
	       n * 2 * 2 * SLUICE_MAX_LIMITS <= max_keys) {
		n *= 2;
		(*bits)++;
	}
	return n;
}

size_t sluice_buckets_fixed_slots(uint64_t max)
{
	size_t n = MIN_SLOTS;

	while (n * 3 < max * 4)
		n *= 2;
	return n;
}

/* Stores the state of a bucket that has none yet.  On allocation failure
 * the decision stands but the state is not kept (fails open, never
 * crashes). */
static void insert(sluice_shard_t *s, uint64_t h1, uint64_t h2,
		   sluice_state_t state, int64_t now_us, const uint64_t *keep,
		   size_t nkeep)
{
	sluice_slot_t sl;

	if (s->t->count >= s->max && evict_one(s, now_us, keep, nkeep) != 0) {
		/* No room but this call's own buckets: drop this state (the
		 * bound holds; the bucket restarts full, counted as lost). */
		s->t->evicted_lossy++;
		s->t->evicted_debt_us +=
			(uint64_t)(sluice_state_expiry_us(state) -
				   clamp_now(now_us));
		return;
	}
	if ((s->t->count + 1) * 4 > (s->mask + 1) * 3 && grow(s) != 0)
		return;
	sl.h1 = h1;
	sl.h2 = h2;
	sl.state = state;
	if (place(s->slots, s->mask, &sl))
		s->t->count++;
}

/*
 * A bucket's identity: the key's hash XORed with the limit's exact value.
 * capacity <= 2^52 and per < 2^10 fill 63 bits of the first word, interval
 * <= 2^52 the second: distinct limits (in lowest terms, as
 * sluice_limit_init() keeps them) give distinct identities for one key.
 */
static void bucket_id(const uint64_t h[2], const sluice_limit_t *l,
		      uint64_t *h1, uint64_t *h2)
{
	*h1 = h[0] ^ (l->capacity | (uint64_t)l->rate.per << 53);
	*h1 += !*h1; /* 0 marks an empty slot */
	*h2 = h[1] ^ l->rate.interval;
}

/* 1 when bucket i of a call repeats an earlier one (the same limit given
 * twice is one bucket, charged once). */
static int seen_before(const uint64_t *h1, const uint64_t *h2, size_t i)
{
	size_t j;

	for (j = 0; j < i; j++)
		if (h1[j] == h1[i] && h2[j] == h2[i])
			return 1;
	return 0;
}

/* The shard of a key's hash. */
static sluice_shard_t *shard_of(sluice_buckets_t *m, const uint64_t h[2])
{
	return &m->shards[shard_index(m, h[0])];
}

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
 * its home slot and the next one (a 24-byte slot may straddle two lines,
 * and a probe usually ends one slot on), so that both misses overlap.
 * Without the shard's lock: the slot array and its size are read
 * atomically (grow() replaces them under the lock) and a prefetch of a
 * stale address is only a wasted hint.
 */
static void prefetch_bucket(const sluice_shard_t *s, uint64_t h1)
{
	const sluice_slot_t *slots =
		__atomic_load_n(&s->slots, __ATOMIC_RELAXED);
	uint64_t mask = __atomic_load_n(&s->mask, __ATOMIC_RELAXED);
	const char *at = (const char *)&slots[h1 & mask];

	__builtin_prefetch(at, 1, 0);
	if ((h1 & mask) < mask)
		__builtin_prefetch(at + 2 * sizeof(sluice_slot_t) - 1, 1, 0);
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
	if (commit)
		reclaim_elsewhere(m, now_us);

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
			insert(s, h1[i], h2[i], next[i], now_us, h1, nlimits);
	reclaim_step(s, now_us, RECLAIM_STEP);
	shard_unlock(s);

	if (summary)
		*summary = sum;
	return allowed;
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
	sluice_siphash13_128(m->seed, key, keylen, h);
	return take_hashed(m, h, limits, nlimits, cost, now_us, decisions,
			   summary, commit);
}

int sluice_buckets_take(sluice_buckets_t *m, const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits,
			uint64_t cost, int64_t now_us,
			sluice_decision_t *decisions,
			sluice_decision_t *summary)
{
	return take_key(m, key, keylen, limits, nlimits, cost, now_us,
			decisions, summary, 1);
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
 * slot array and its size are read atomically (grow() replaces them under
 * the lock) and a prefetch of a stale address is only a wasted hint.
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
		sluice_siphash13_128(m->seed, items[i].key, items[i].keylen,
				     h[i]);
		prefetch_home(m, h[i], &items[i].limits[0]);
	}
	for (i = 0; i < n; i++) {
		sluice_take_item_t *it = &items[i];
		uint64_t *hi = h[i % EACH_AHEAD];
		size_t j = i + EACH_AHEAD;

		rc = take_hashed(m, hi, it->limits, it->nlimits, it->cost,
				 now_us, NULL, &it->summary, 1);
		if (rc < 0)
			return rc;
		it->allowed = rc;
		allowed += rc;
		if (j < n) {
			sluice_siphash13_128(m->seed, items[j].key,
					     items[j].keylen, hi);
			prefetch_home(m, hi, &items[j].limits[0]);
		}
	}
	return allowed;
}

/* -------------------------------------------------- reset and refund */

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
	sluice_siphash13_128(m->seed, key, keylen, h);
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
			remove_at(s, (size_t)(at - s->slots));
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
			insert(s, h1[i], h2[i], next[i], now_us, h1, nlimits);
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

/* ------------------------------------------------- several keys at once */

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

		sluice_siphash13_128(m->seed, items[i].key, items[i].keylen, h);
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
		insert(s, b[k].h1, b[k].h2, b[k].next, now_us, keep, nkeep);
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
	assert(m->nshards == 64 || shards >> m->nshards == 0);
	for (rest = shards, last = -1; rest; rest &= rest - 1) {
		assert(__builtin_ctzll(rest) > last);
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
	reclaim_elsewhere(m, now_us);
	rc = all;
out:
	if (b != stack_b)
		free(b);
	if (keep != stack_keep)
		free(keep);
	return rc;
}
