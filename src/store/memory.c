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
 * background thread and no stop-the-world scan: every call also examines
 * RECLAIM_STEP slots at its shard's cursor, and every RECLAIM_EVERY-th call
 * of a thread sweeps RECLAIM_AWAY slots of another shard (if its lock is
 * free), so shards that traffic no longer reaches are emptied too.  The
 * cost of reclaiming is spread evenly over the traffic.
 */
#include "sluice.h"
#include "util/siphash.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHARDS    64
#define MAX_STATES    64
#define MAX_KEYLEN    65535
#define MIN_SLOTS     16
#define EVICT_WINDOW  32
#define RECLAIM_STEP  2
#define RECLAIM_EVERY 16
#define RECLAIM_AWAY  32

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
	entry_t **slots;
	size_t mask; /* slots - 1 (a power of two minus one) */
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

static size_t slot_of(const shard_t *s, uint64_t hash)
{
	return (size_t)hash & s->mask;
}

/* Removes the entry at slot i and shifts the following run back so that
 * linear probing still finds every key (no tombstones). */
static void remove_at(shard_t *s, size_t i)
{
	size_t j = i;

	free(s->slots[i]);
	s->slots[i] = NULL;
	s->count--;
	for (;;) {
		size_t home;
		entry_t *e;

		j = (j + 1) & s->mask;
		e = s->slots[j];
		if (!e)
			return;
		home = e->hash & s->mask;
		/* Move e into the hole unless its home lies cyclically in
		 * (i, j], where it can still be found without passing i. */
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			s->slots[i] = e;
			s->slots[j] = NULL;
			i = j;
		}
	}
}

static void place(shard_t *s, entry_t *e)
{
	size_t i = e->hash & s->mask;

	while (s->slots[i])
		i = (i + 1) & s->mask;
	s->slots[i] = e;
}

/* Doubles the slot array; returns -1 (leaving the table as it was) when out
 * of memory. */
static int grow(shard_t *s)
{
	size_t old = s->mask + 1, i;
	entry_t **prev = s->slots;
	entry_t **next = calloc(old * 2, sizeof(*next));

	if (!next)
		return -1;
	s->slots = next;
	s->mask = old * 2 - 1;
	for (i = 0; i < old; i++)
		if (prev[i])
			place(s, prev[i]);
	free(prev);
	s->hand &= s->mask;
	s->cursor &= s->mask;
	return 0;
}

static long find(const shard_t *s, uint64_t hash, const void *key,
		 size_t keylen)
{
	size_t i = slot_of(s, hash);
	entry_t *e;

	while ((e = s->slots[i]) != NULL) {
		if (e->hash == (uint32_t)hash && e->keylen == keylen &&
		    memcmp(entry_key(e), key, keylen) == 0)
			return (long)i;
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
		entry_t *e = s->slots[i];

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
		entry_t *e = s->slots[i];

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
				free(s->slots[j]);
		free(s->slots);
		pthread_mutex_destroy(&s->lock);
	}
	free(m);
}

/* Every RECLAIM_EVERY-th call of a thread sweeps a little of another shard,
 * chosen round-robin; a busy shard is simply skipped this time. */
static void reclaim_elsewhere(sluice_memstore_t *m, int64_t now_us)
{
	static __thread unsigned tick;
	shard_t *s;

	if (m->nshards < 2 || ++tick % RECLAIM_EVERY != 0)
		return;
	s = &m->shards[(tick / RECLAIM_EVERY) & (m->nshards - 1)];
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
	if (!e)
		return;
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
	if (at >= 0 && s->slots[at]->nstates != nlimits) {
		/* The key's limits changed (a new config): start afresh. */
		remove_at(s, (size_t)at);
		at = -1;
	}
	if (at >= 0)
		memcpy(cur, s->slots[at]->states, nlimits * sizeof(cur[0]));
	else
		memset(cur, 0, nlimits * sizeof(cur[0]));

	allowed = sluice_eval_all(limits, cur, nlimits, now_us, cost, next,
				  decisions, &sum);
	if (at >= 0) {
		entry_t *e = s->slots[at];

		memcpy(e->states, next, nlimits * sizeof(next[0]));
		e->ref = 1;
	} else if (allowed && cost > 0) {
		insert(s, hash, key, keylen, next, nlimits, now_us);
	}
	reclaim_step(s, now_us, RECLAIM_STEP);
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
