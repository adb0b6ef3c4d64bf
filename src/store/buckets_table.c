/*
 * buckets_table.c -- the bucket table of the local stores: the memory
 * store (memory.c, one process) and the shared-memory store (shm.c, every
 * process of a host); its slot arrays, and placing, removing and growing
 * in a shard.  buckets_int.h lists the table's other files.
 *
 * Identity.  A bucket is a key and one of its limits.  The key is known by
 * a 128-bit keyed hash (SipHash-1-3-128 under a secret drawn at creation;
 * keys of up to 16 bytes are encrypted with AES-128 under secrets of their
 * own where the processor has AES-NI -- for a shared file, its creator's:
 * util/aeshash.h) instead of its bytes, and the bucket by that hash XORed with
 * the limit's exact value (capacity, interval, per: they pack into 127 bits, so
 * two limits of one key never share a bucket).  A bucket is never identified by
 * the limit's position among the key's limits: a client that switches tiers, or
 * a rule that gains or loses a limit, finds every remaining limit's state where
 * it was.  Without the secret nobody can find two keys with the same identity,
 * and by chance two of a billion buckets share one with probability below
 * 2^-66; in exchange the table needs no key bytes, and a decision touches one
 * table slot per limit and nothing else.
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
 */
#include "store/buckets_int.h"
#include "util/invariant.h"
#include "util/platform.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
#if SLUICE_LINUX
	madvise(p, bytes, MADV_HUGEPAGE); /* a hint; fine if refused */
#endif
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
#if SLUICE_LINUX
	madvise(a->base, off, MADV_HUGEPAGE); /* a hint; fine if refused */
#endif
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

/* Removes the key at slot i and shifts the following run back so that
 * linear probing still finds every key (no tombstones). */
void sluice_shard_remove_at(sluice_shard_t *s, size_t i)
{
	size_t j = i;

	/* A slot of this shard; in a table this process owns (one that
	 * grows), a used one, counted.  A shared table's slots and count are
	 * the file's: another process may have damaged them, and a fault on
	 * another thread zeroes them under this one (shm.c). */
	SLUICE_ASSERT(i <= s->mask);
	SLUICE_ASSERT(!s->can_grow || (s->slots[i].h1 != 0 && s->t->count > 0));
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

/* Doubles the slot array; returns -1 (leaving the table as it was) when out
 * of memory. */
int sluice_shard_grow(sluice_shard_t *s)
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
	set_cursor(s, s->t->cursor & s->mask);
	return 0;
}

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
