/*
 * buckets.h -- the bucket table both local stores share: the memory store
 * (one process) and the shared-memory store (every process on a host).
 *
 * The table lives where its store puts it: the memory store allocates it,
 * the shared-memory store maps it from a file.  So the parts that may be
 * shared (slots, table counters, locks) hold no pointers, and each process
 * keeps its own view (sluice_shard_t) of where they are.
 */
#ifndef SLUICE_STORE_BUCKETS_H
#define SLUICE_STORE_BUCKETS_H

#include "sluice.h"

#include <pthread.h>

/* One bucket: its identity (h1 = 0 marks an empty slot) and its state. */
typedef struct sluice_slot_s {
	uint64_t h1, h2;
	sluice_state_t state;
} sluice_slot_t;

/* A shard's table counters (no pointers: may live in shared memory).
 * The ones every take touches come first: placed right after the shard's
 * lock, they share its cache line (a glibc mutex is 40 bytes), so a take
 * that another core's take preceded fetches one line of them, not two. */
typedef struct sluice_table_s {
	uint64_t cursor; /* incremental reclaim position (moves every take) */
	uint64_t count;
	uint64_t mask; /* number of slots - 1 (a power of two minus one) */
	uint64_t max;
	uint64_t hand; /* where the next eviction starts looking */
	uint64_t expired, evicted_full, evicted_lossy, evicted_debt_us;
	uint64_t recovered; /* repairs after a lock holder died */
} sluice_table_t;

/*
 * The slot arrays of a memory store's shards from the size at which one
 * size's arrays, across all shards, fill a huge page (2 MiB): one
 * reservation where each size has a region, every shard's array of that
 * size side by side in it, offered huge pages.  A shard's own array is
 * smaller than a huge page up to millions of keys, so on its own it gets
 * 4 KiB pages, and a random probe into tens of MiB of them costs a TLB
 * miss (a page walk) on top of the cache miss; side by side, the shards
 * share huge pages.  The shards grow together (keys spread evenly), so a
 * region fills as its predecessor empties (released page by page).
 */
#define SLUICE_ARENA_SIZES 48

typedef struct sluice_arena_s {
	char *base;   /* NULL: every array is allocated on its own */
	size_t bytes; /* reserved (address space; pages come on first use) */
	size_t nshards;
	size_t from;  /* the smallest array here, in slots (a power of two) */
	size_t sizes; /* regions: arrays of from, 2 * from, ... slots */
	size_t off[SLUICE_ARENA_SIZES]; /* each region's offset from base */
} sluice_arena_t;

/* A process's view of one shard. */
typedef struct sluice_shard_s {
	pthread_mutex_t *lock; /* robust when shared between processes */
	sluice_table_t *t;
	sluice_slot_t *slots;
	/* The table's size and bound as this process knows them: a shared
	 * table's counters (t) live in a file anyone with write access may
	 * change, so indices come from these, never from t->mask. */
	uint64_t mask, max;
	int can_grow;	  /* 0: the slot array is fixed, sized for max */
	unsigned wait_ms; /* longest wait for the lock; 0: forever */
	int stuck;	  /* a wait timed out; fail at once while busy */
	int lock_kind;	  /* glibc's type word the lock must keep; 0: any */
	sluice_arena_t *arena; /* growing tables: where arrays may live */
	size_t index;	       /* this shard's place in the arena's regions */
} sluice_shard_t;

#define SLUICE_MAX_SHARDS 64

struct sluice_aeshash_s;

typedef struct sluice_buckets_s {
	const uint8_t *seed; /* the SipHash key, 16 bytes */
	/* The keys' identity for keys of at most 16 bytes when set (the
	 * memory store with AES-NI, a shared file made with it):
	 * util/aeshash.h; SipHash otherwise. */
	const struct sluice_aeshash_s *aes;
	unsigned shift; /* 64 - log2(nshards) */
	size_t nshards; /* a power of two <= SLUICE_MAX_SHARDS */
	uint64_t max_keys;
	sluice_shard_t *shards;
} sluice_buckets_t;

/* How many shards max_keys buckets get (every shard holds at least two
 * calls' worth of buckets when max_keys allows); *bits is its log2. */
size_t sluice_buckets_nshards(size_t max_keys, unsigned *bits);

/* The slots a fixed table needs for max buckets (at most 3/4 full). */
size_t sluice_buckets_fixed_slots(uint64_t max);

/* As sluice_memstore_take(), sluice_memstore_take_many() and
 * sluice_memstore_stats(), over any table; these and reset/refund return
 * SLUICE_ESTORE when a shard's lock cannot be taken (a shared lock held
 * past wait_ms, or damaged). */
int sluice_buckets_take(sluice_buckets_t *m, const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits,
			uint64_t cost, int64_t now_us,
			sluice_decision_t *decisions,
			sluice_decision_t *summary);
int sluice_buckets_take_many(sluice_buckets_t *m, sluice_take_item_t *items,
			     size_t n, int64_t now_us);
/* As sluice_memstore_take_each(), over any table. */
int sluice_buckets_take_each(sluice_buckets_t *m, sluice_take_item_t *items,
			     size_t n, int64_t now_us);
/* The memory and shared-memory stores' reset and refund (sluice.h). */
int sluice_buckets_reset(sluice_buckets_t *m, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits);
int sluice_buckets_refund(sluice_buckets_t *m, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits,
			  uint64_t cost, int64_t now_us);
/* The memory and shared-memory stores' peek, penalize (block 0: amount
 * is a cost) and block (block 1: amount is in ms). */
int sluice_buckets_peek(sluice_buckets_t *m, const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits,
			uint64_t cost, int64_t now_us,
			sluice_decision_t *decisions,
			sluice_decision_t *summary);
int sluice_buckets_adjust(sluice_buckets_t *m, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits,
			  int block, uint64_t amount, int64_t now_us);
void sluice_buckets_stats(sluice_buckets_t *m, sluice_memstore_stats_t *out);
/* The memory and shared-memory stores' carry (sluice_memstore_carry()):
 * buckets_carry.c. */
int sluice_buckets_carry(sluice_buckets_t *m, const void *key, size_t keylen,
			 const sluice_limit_t *to, const sluice_limit_t *from,
			 size_t nfrom, int64_t now_us);

/* The memory and shared-memory stores' reserve, conditional refund and
 * set (sluice_reserve.h); left may be NULL. */
int sluice_buckets_reserve(sluice_buckets_t *m, const void *key, size_t keylen,
			   const sluice_limit_t *limits, size_t nlimits,
			   uint64_t cost, uint64_t max_wait_us, int64_t now_us,
			   sluice_decision_t *summary, uint64_t *wait_us,
			   sluice_state_t *left);
int sluice_buckets_refund_if(sluice_buckets_t *m, const void *key,
			     size_t keylen, const sluice_limit_t *limits,
			     size_t nlimits, uint64_t cost,
			     const sluice_state_t *expected, int64_t now_us);
int sluice_buckets_set(sluice_buckets_t *m, const void *key, size_t keylen,
		       const sluice_limit_t *limits, size_t nlimits,
		       uint64_t remaining, int64_t now_us);

/* Rebuilds a shard's table from the entries it holds (after its lock's
 * holder died mid-update); the caller holds the lock.  Bounded whatever
 * the slots hold. */
void sluice_shard_repair(sluice_shard_t *s);

/* Checks a shard's invariants (count, bound, every entry reachable and
 * unique), taking its lock; 0 or -1 with a message in err. */
int sluice_shard_check(sluice_shard_t *s, char *err, size_t errlen);

/* A zeroed slot array of n slots (huge pages offered from 2 MiB), and its
 * release; for tables a process allocates (the memory store). */
sluice_slot_t *sluice_slots_alloc(size_t n);
void sluice_slots_free(sluice_slot_t *slots, size_t n);

/* Reserves an arena for nshards shards whose arrays grow up to max_slots
 * slots each; on any failure (or tables too small to share a huge page)
 * a->base stays NULL and arrays are allocated on their own. */
void sluice_arena_init(sluice_arena_t *a, size_t nshards, size_t max_slots);
void sluice_arena_free(sluice_arena_t *a);

/* A zeroed array of n slots for shard s (from its arena when it has a
 * region for n), and its release. */
sluice_slot_t *sluice_shard_slots_alloc(sluice_shard_t *s, size_t n);
void sluice_shard_slots_free(sluice_shard_t *s, sluice_slot_t *slots, size_t n);

#endif
