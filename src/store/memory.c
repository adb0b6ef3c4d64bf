/*
 * memory.c -- the embedded store: bucket states in this process's memory.
 *
 * Layout.  The table is split into shards (a power of two, up to 64), each
 * with its own mutex, so concurrent callers on different keys rarely meet.
 * A key's shard comes from the top bits of a keyed SipHash (clients choose
 * keys, so the hash must not be predictable), its slot from the low bits.
 * Each shard is an open-addressing table (linear probing, backward-shift
 * deletion) of pointers to entries; an entry is one allocation holding a
 * small header, one sluice_state_t per limit, and the key bytes.  With one
 * limit and a 16-byte key that is a 32-byte allocation plus about 11-21
 * bytes of table slot: well under 64 bytes per key beyond the key itself.
 *
 * Bound.  Each shard holds at most its share of max_keys (the shares add up
 * to max_keys exactly).  A full shard evicts before inserting: it prefers a
 * full bucket (its state expired: forgetting it loses nothing) found within
 * a window of EVICT_WINDOW entries from the clock hand, else the least
 * recently used entry as approximated by CLOCK (a reference bit per entry,
 * cleared as the hand passes).  Lossy evictions are counted.
 *
 * Expiry.  A state is dead once its bucket is full again.  There is no
 * background thread and no stop-the-world scan: every RECLAIM_EVERY-th
 * call of a thread examines one slot at its shard's cursor, and every
 * RECLAIM_AWAY_EVERY-th call sweeps RECLAIM_AWAY slots of another shard (if
 * its lock is free), so shards that traffic no longer reaches are emptied
 * too.  Looking at a slot costs a cache miss on its entry, so the sweep is
 * kept to about half a slot per call: the cost of reclaiming is small and
 * spread evenly over the traffic, and the bound holds regardless through
 * eviction.
 */
#include "sluice.h"
#include "util/siphash.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHARDS	   64
#define MAX_STATES	   64
#define MAX_KEYLEN	   65535
#define MIN_SLOTS	   16
#define EVICT_WINDOW	   32
#define RECLAIM_EVERY	   4
#define RECLAIM_AWAY_EVERY 64
#define RECLAIM_AWAY	   16

typedef struct entry_s {
	uint32_t hash; /* low 32 bits of the key's hash, to skip memcmp */
	uint16_t keylen;
	uint8_t nstates;
	uint8_t ref; /* CLOCK reference bit */
	sluice_state_t states[];
	/* followed by keylen key bytes */
} entry_t;

typedef struct shard_s {
	pthread_mutex_t lock;
	uintptr_t *slots; /* tagged entry pointers, see slot_of_entry() */
	size_t mask;	  /* slots - 1 (a power of two minus one) */
	size_t count;
	size_t max;
	size_t hand;   /* CLOCK hand for eviction */
	size_t cursor; /* incremental reclaim position */
	uint64_t expired, evicted_full, evicted_lossy;
	char pad[64]; /* keep neighbouring locks off one cache line */
} shard_t;

struct sluice_memstore_s {
	uint8_t seed[16];
	unsigned shift; /* 64 - log2(nshards) */
	size_t nshards;
	size_t max_keys;
	shard_t shards[];
};

static uint8_t *entry_key(entry_t *e)
{
	return (uint8_t *)&e->states[e->nstates];
}

/* 1 when every state of e describes a full bucket at now_us. */
static int entry_dead(const entry_t *e, int64_t now_us)
{
	uint8_t i;

	for (i = 0; i < e->nstates; i++)
		if (sluice_state_expiry_us(e->states[i]) > now_us)
			return 0;
	return 1;
}

/* ------------------------------------------------------------- the table */

/*
 * A slot holds an entry pointer with 16 bits of the key's hash in its top
 * bits, which user-space pointers on x86-64 and arm64 (48-bit addresses)
 * leave at zero.  A probe compares tags first, so it touches (and misses
 * the cache on) an entry only when it is almost surely the one sought.
 */
#define TAG_SHIFT 48

static uintptr_t tag_of(uint32_t hash)
{
	return (uintptr_t)(hash >> 16) << TAG_SHIFT;
}

static entry_t *untag(uintptr_t slot)
{
	return (entry_t *)(slot & (((uintptr_t)1 << TAG_SHIFT) - 1));
}

static entry_t *entry_at(const shard_t *s, size_t i)
{
	return untag(s->slots[i]);
}

static uintptr_t slot_of_entry(entry_t *e)
{
	return (uintptr_t)e | tag_of(e->hash);
}

/* Removes the entry at slot i and shifts the following run back so that
 * linear probing still finds every key (no tombstones). */
static void remove_at(shard_t *s, size_t i)
{
	size_t j = i;

	free(entry_at(s, i));
	s->slots[i] = 0;
	s->count--;
	for (;;) {
		size_t home;
		entry_t *e;

		j = (j + 1) & s->mask;
		if (!s->slots[j])
			return;
		e = entry_at(s, j);
		home = e->hash & s->mask;
		/* Move e into the hole unless its home lies cyclically in
		 * (i, j], where it can still be found without passing i. */
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			s->slots[i] = s->slots[j];
			s->slots[j] = 0;
			i = j;
		}
	}
}

static void place(shard_t *s, entry_t *e)
{
	size_t i = e->hash & s->mask;

	while (s->slots[i])
		i = (i + 1) & s->mask;
	s->slots[i] = slot_of_entry(e);
}

/* Doubles the slot array; returns -1 (leaving the table as it was) when out
 * of memory. */
static int grow(shard_t *s)
{
	size_t old = s->mask + 1, i;
	uintptr_t *prev = s->slots;
	uintptr_t *next = calloc(old * 2, sizeof(*next));

	if (!next)
		return -1;
	s->slots = next;
	s->mask = old * 2 - 1;
	for (i = 0; i < old; i++)
		if (prev[i])
			place(s, untag(prev[i]));
	free(prev);
	s->hand &= s->mask;
	s->cursor &= s->mask;
	return 0;
}

static long find(const shard_t *s, uint64_t hash, const void *key,
		 size_t keylen)
{
	size_t i = (size_t)hash & s->mask;
	uintptr_t tag = tag_of((uint32_t)hash), v;

	while ((v = s->slots[i]) != 0) {
		if ((v & ~(((uintptr_t)1 << TAG_SHIFT) - 1)) == tag) {
			entry_t *e = untag(v);

			if (e->hash == (uint32_t)hash && e->keylen == keylen &&
			    memcmp(entry_key(e), key, keylen) == 0)
				return (long)i;
		}
		i = (i + 1) & s->mask;
	}
	return -1;
}

/* --------------------------------------------------- expiry and eviction */

static void reclaim_step(shard_t *s, int64_t now_us, int steps)
{
	int n;

	for (n = 0; n < steps && s->count > 0; n++) {
		size_t i = s->cursor;
		entry_t *e = s->slots[i] ? entry_at(s, i) : NULL;

		if (e && entry_dead(e, now_us)) {
			/* remove_at may shift a live entry into slot i: look
			 * at the same slot again next time. */
			remove_at(s, i);
			s->expired++;
		} else {
			s->cursor = (i + 1) & s->mask;
		}
	}
}

/* Frees one entry to make room (the shard is at its bound, so not empty). */
static void evict_one(shard_t *s, int64_t now_us)
{
	size_t i = s->hand, seen = 0;
	long victim = -1;

	for (;; i = (i + 1) & s->mask) {
		entry_t *e = s->slots[i] ? entry_at(s, i) : NULL;

		if (!e)
			continue;
		if (entry_dead(e, now_us)) {
			remove_at(s, i);
			s->evicted_full++;
			s->hand = i;
			return;
		}
		if (victim < 0) {
			if (e->ref)
				e->ref = 0; /* second chance */
			else
				victim = (long)i;
		}
		if (++seen >= EVICT_WINDOW && victim >= 0)
			break;
	}
	remove_at(s, (size_t)victim);
	s->evicted_lossy++;
	s->hand = ((size_t)victim + 1) & s->mask;
}

/* ------------------------------------------------------------ public API */

sluice_memstore_t *sluice_memstore_new(size_t max_keys)
{
	sluice_memstore_t *m;
	size_t n = 1, i;
	unsigned bits = 0;

	if (max_keys == 0)
		return NULL;
	while (n < MAX_SHARDS && n * 2 <= max_keys) {
		n *= 2;
		bits++;
	}
	m = calloc(1, sizeof(*m) + n * sizeof(shard_t));
	if (!m)
		return NULL;
	sluice_random_bytes(m->seed, sizeof(m->seed));
	m->nshards = n;
	m->shift = 64 - bits;
	m->max_keys = max_keys;
	for (i = 0; i < n; i++) {
		shard_t *s = &m->shards[i];

		pthread_mutex_init(&s->lock, NULL);
		s->max = max_keys / n + (i < max_keys % n);
		s->slots = calloc(MIN_SLOTS, sizeof(*s->slots));
		s->mask = MIN_SLOTS - 1;
		if (!s->slots) {
			sluice_memstore_free(m);
			return NULL;
		}
	}
	return m;
}

void sluice_memstore_free(sluice_memstore_t *m)
{
	size_t i, j;

	if (!m)
		return;
	for (i = 0; i < m->nshards; i++) {
		shard_t *s = &m->shards[i];

		if (s->slots)
			for (j = 0; j <= s->mask; j++)
				free(entry_at(s, j));
		free(s->slots);
		pthread_mutex_destroy(&s->lock);
	}
	free(m);
}

/* Reclaiming is shared out by a per-thread call counter. */
static __thread unsigned reclaim_tick;

/* Every RECLAIM_AWAY_EVERY calls, after its own shard is unlocked, a thread
 * sweeps part of another shard (round-robin; skipped when busy). */
static void reclaim_elsewhere(sluice_memstore_t *m, int64_t now_us)
{
	shard_t *s;

	if (m->nshards < 2 || reclaim_tick % RECLAIM_AWAY_EVERY != 0)
		return;
	s = &m->shards[(reclaim_tick / RECLAIM_AWAY_EVERY) & (m->nshards - 1)];
	if (pthread_mutex_trylock(&s->lock) != 0)
		return;
	reclaim_step(s, now_us, RECLAIM_AWAY);
	pthread_mutex_unlock(&s->lock);
}

/* Stores states for a key that has none yet; on allocation failure the
 * decision stands but the state is not kept (fails open, never crashes). */
static void insert(shard_t *s, uint64_t hash, const void *key, size_t keylen,
		   const sluice_state_t *states, size_t n, int64_t now_us)
{
	entry_t *e;

	if (s->count >= s->max)
		evict_one(s, now_us);
	if ((s->count + 1) * 4 > (s->mask + 1) * 3 && grow(s) != 0)
		return;
	e = malloc(sizeof(*e) + n * sizeof(sluice_state_t) + keylen);
	if (!e || ((uintptr_t)e >> TAG_SHIFT) != 0) {
		free(e); /* no room for a tag: decide, but keep no state */
		return;
	}
	e->hash = (uint32_t)hash;
	e->keylen = (uint16_t)keylen;
	e->nstates = (uint8_t)n;
	e->ref = 1;
	memcpy(e->states, states, n * sizeof(sluice_state_t));
	memcpy(entry_key(e), key, keylen);
	place(s, e);
	s->count++;
}

int sluice_memstore_take(sluice_memstore_t *m, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits,
			 uint64_t cost, int64_t now_us,
			 sluice_decision_t *decisions,
			 sluice_decision_t *summary)
{
	sluice_state_t cur[MAX_STATES], next[MAX_STATES];
	sluice_decision_t local[MAX_STATES], sum;
	uint64_t hash;
	shard_t *s;
	long at;
	int allowed;

	if (nlimits == 0 || nlimits > MAX_STATES || keylen > MAX_KEYLEN)
		return SLUICE_EINVAL;
	if (!decisions)
		decisions = local;
	hash = sluice_siphash13(m->seed, key, keylen);
	s = &m->shards[m->nshards > 1 ? hash >> m->shift : 0];

	pthread_mutex_lock(&s->lock);
	at = find(s, hash, key, keylen);
	if (at >= 0 && entry_at(s, (size_t)at)->nstates != nlimits) {
		/* The key's limits changed (a new config): start afresh. */
		remove_at(s, (size_t)at);
		at = -1;
	}
	if (at >= 0)
		memcpy(cur, entry_at(s, (size_t)at)->states,
		       nlimits * sizeof(cur[0]));
	else
		memset(cur, 0, nlimits * sizeof(cur[0]));

	allowed = sluice_eval_all(limits, cur, nlimits, now_us, cost, next,
				  decisions, &sum);
	if (at >= 0) {
		entry_t *e = entry_at(s, (size_t)at);

		memcpy(e->states, next, nlimits * sizeof(next[0]));
		e->ref = 1;
	} else if (allowed && cost > 0) {
		insert(s, hash, key, keylen, next, nlimits, now_us);
	}
	if (++reclaim_tick % RECLAIM_EVERY == 0)
		reclaim_step(s, now_us, 1);
	pthread_mutex_unlock(&s->lock);
	reclaim_elsewhere(m, now_us);

	if (summary)
		*summary = sum;
	return allowed;
}

void sluice_memstore_stats(sluice_memstore_t *m, sluice_memstore_stats_t *out)
{
	size_t i;

	memset(out, 0, sizeof(*out));
	out->max_keys = m->max_keys;
	for (i = 0; i < m->nshards; i++) {
		shard_t *s = &m->shards[i];

		pthread_mutex_lock(&s->lock);
		out->keys += s->count;
		out->expired += s->expired;
		out->evicted_full += s->evicted_full;
		out->evicted_lossy += s->evicted_lossy;
		pthread_mutex_unlock(&s->lock);
	}
}
