/*
 * buckets_lock.c -- a shard's lock (the uncontended path is in
 * buckets_int.h), recovery after its holder died, and the repair and
 * check of a shard's table.
 */
#include "store/buckets_int.h"
#include "util/platform.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

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
#if SLUICE_LINUX
	sluice_shard_repair(s);
	s->t->recovered++;
	return pthread_mutex_consistent(s->lock);
#else
	/* No robust mutex here (only the shared-memory store makes them,
	 * and it needs Linux): EOWNERDEAD cannot come. */
	(void)s;
	return EINVAL;
#endif
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

static int64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#if SLUICE_LINUX
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
#else
/* Where pthread_mutex_timedlock() is missing (macOS): a trylock every
 * millisecond until wait_ms has passed. */
static int timedlock_sliced(pthread_mutex_t *lock, unsigned wait_ms)
{
	int64_t end = monotonic_ms() + wait_ms;
	struct timespec ms = {0, 1000000L};
	int rc;

	while ((rc = pthread_mutex_trylock(lock)) == EBUSY) {
		if (monotonic_ms() >= end)
			return ETIMEDOUT;
		nanosleep(&ms, NULL);
	}
	return rc;
}
#endif

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

/* shard_lock() (buckets_int.h) from its first trylock's answer rc on. */
int sluice_shard_lock_rest(sluice_shard_t *s, int rc)
{
	int spins;

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

int sluice_shard_trylock(sluice_shard_t *s)
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
	set_cursor(s, s->t->cursor & s->mask);
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
