/*
 * memory.c -- the embedded store: bucket states in this process's memory.
 *
 * Identity.  A key is known by a 126-bit keyed hash (SipHash-1-3-128 under
 * a secret drawn at creation) instead of its bytes.  Without the
 * secret nobody can find two keys with the same identity, and by chance two
 * of a billion keys share one with probability below 2^-66; in exchange the
 * table needs no key bytes, and a decision touches one table slot and
 * nothing else: one cache miss where a table of pointers to entries costs
 * two or three.  Keys may be of any length.
 *
 * Layout.  The table is split into shards (a power of two, up to 64), each
 * with its own mutex, so concurrent callers on different keys rarely meet.
 * A key's shard comes from the top bits of its first hash, its home slot
 * from the low bits.  A shard is an open-addressing table (linear probing,
 * backward-shift deletion, at most 3/4 full) of 24-byte slots: both hashes
 * and the state.  A key with several limits keeps its states in a small
 * array the slot points to.  That is 32 to 64 bytes per key, whatever the
 * key's length.
 *
 * Bound.  Each shard holds at most its share of max_keys (the shares add up
 * to max_keys exactly).  A full shard evicts before inserting: it prefers a
 * full bucket (its state expired: forgetting it loses nothing) found within
 * a window of EVICT_WINDOW keys from the clock hand, else the least recently
 * used key as approximated by CLOCK (a reference bit per slot, cleared as
 * the hand passes).  Lossy evictions are counted.
 *
 * Expiry.  A state is dead once its bucket is full again.  There is no
 * background thread and no stop-the-world scan: every call also examines
 * RECLAIM_STEP slots at its shard's cursor, and every RECLAIM_AWAY_EVERY-th
 * call of a thread sweeps RECLAIM_AWAY slots of another shard (if its lock
 * is free), so shards that traffic no longer reaches are emptied too.  The
 * cost of reclaiming is spread evenly over the traffic.
 */
#include "sluice.h"
#include "util/siphash.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_SHARDS	   64
#define MAX_STATES	   64
#define MIN_SLOTS	   16
#define EVICT_WINDOW	   32
#define RECLAIM_STEP	   2
#define RECLAIM_AWAY_EVERY 16
#define RECLAIM_AWAY	   32

/* Flag bits in slot_t.h2; the rest of h2 is identity. */
#define H2_REF	 UINT64_C(1) /* CLOCK reference bit */
#define H2_MULTI UINT64_C(2) /* `state` points to a multi_t */
#define H2_ID	 (~UINT64_C(3))

/* Several limits: the slot's state field holds a pointer to this. */
typedef struct multi_s {
	size_t n;
	sluice_state_t states[];
} multi_t;

typedef struct slot_s {
	uint64_t h1; /* first hash; 0 marks an empty slot */
	uint64_t h2; /* second hash, with the H2_* flags in its low bits */
	union {
		sluice_state_t state; /* one limit */
		multi_t *multi;	      /* several (H2_MULTI) */
	} u;
} slot_t;

typedef struct shard_s {
	pthread_mutex_t lock;
	slot_t *slots;
	size_t mask; /* number of slots - 1 (a power of two minus one) */
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

/* 1 when every state of the slot describes a full bucket at now_us. */
static int slot_dead(const slot_t *sl, int64_t now_us)
{
	size_t i;

	if (!(sl->h2 & H2_MULTI))
		return sluice_state_expiry_us(sl->u.state) <= now_us;
	for (i = 0; i < sl->u.multi->n; i++)
		if (sluice_state_expiry_us(sl->u.multi->states[i]) > now_us)
			return 0;
	return 1;
}

/* ------------------------------------------------------------- the table */

/*
 * Slot arrays of 2 MiB and more are mapped directly and offered huge pages:
 * a random probe into a large table otherwise costs a TLB miss (a page walk
 * through memory) on top of the cache miss on the slot itself.
 */
#define HUGE_BYTES ((size_t)2 << 20)

static slot_t *slots_alloc(size_t n)
{
	size_t bytes = n * sizeof(slot_t);
	void *p;

	if (bytes < HUGE_BYTES)
		return calloc(n, sizeof(slot_t));
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	madvise(p, bytes, MADV_HUGEPAGE); /* a hint; fine if refused */
	return p;
}

static void slots_free(slot_t *slots, size_t n)
{
	if (n * sizeof(slot_t) < HUGE_BYTES)
		free(slots);
	else if (slots)
		munmap(slots, n * sizeof(slot_t));
}

static void slot_clear(slot_t *sl)
{
	if (sl->h2 & H2_MULTI)
		free(sl->u.multi);
	memset(sl, 0, sizeof(*sl));
}

/* Removes the key at slot i and shifts the following run back so that
 * linear probing still finds every key (no tombstones). */
static void remove_at(shard_t *s, size_t i)
{
	size_t j = i;

	slot_clear(&s->slots[i]);
	s->count--;
	for (;;) {
		size_t home;

		j = (j + 1) & s->mask;
		if (!s->slots[j].h1)
			return;
		home = s->slots[j].h1 & s->mask;
		/* Move slot j into the hole unless its home lies cyclically
		 * in (i, j], where it can still be found without passing i. */
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			s->slots[i] = s->slots[j];
			memset(&s->slots[j], 0, sizeof(slot_t));
			i = j;
		}
	}
}

static slot_t *place(slot_t *slots, size_t mask, const slot_t *sl)
{
	size_t i = sl->h1 & mask;

	while (slots[i].h1)
		i = (i + 1) & mask;
	slots[i] = *sl;
	return &slots[i];
}

/* Doubles the slot array; returns -1 (leaving the table as it was) when out
 * of memory. */
static int grow(shard_t *s)
{
	size_t old = s->mask + 1, i;
	slot_t *next = slots_alloc(old * 2);

	if (!next)
		return -1;
	for (i = 0; i < old; i++)
		if (s->slots[i].h1)
			place(next, old * 2 - 1, &s->slots[i]);
	slots_free(s->slots, old);
	s->slots = next;
	s->mask = old * 2 - 1;
	s->hand &= s->mask;
	s->cursor &= s->mask;
	return 0;
}

static slot_t *find(const shard_t *s, uint64_t h1, uint64_t h2)
{
	size_t i = h1 & s->mask;
	slot_t *sl;

	while ((sl = &s->slots[i])->h1 != 0) {
		if (sl->h1 == h1 && (sl->h2 & H2_ID) == (h2 & H2_ID))
			return sl;
		i = (i + 1) & s->mask;
	}
	return NULL;
}

/* --------------------------------------------------- expiry and eviction */

static void reclaim_step(shard_t *s, int64_t now_us, int steps)
{
	int n;

	for (n = 0; n < steps && s->count > 0; n++) {
		size_t i = s->cursor;

		if (s->slots[i].h1 && slot_dead(&s->slots[i], now_us)) {
			/* remove_at may shift a live key into slot i: look
			 * at the same slot again next time. */
			remove_at(s, i);
			s->expired++;
		} else {
			s->cursor = (i + 1) & s->mask;
		}
	}
}

/* Frees one slot to make room (the shard is at its bound, so not empty). */
static void evict_one(shard_t *s, int64_t now_us)
{
	size_t i = s->hand, seen = 0;
	long victim = -1;

	for (;; i = (i + 1) & s->mask) {
		slot_t *sl = &s->slots[i];

		if (!sl->h1)
			continue;
		if (slot_dead(sl, now_us)) {
			remove_at(s, i);
			s->evicted_full++;
			s->hand = i;
			return;
		}
		if (victim < 0) {
			if (sl->h2 & H2_REF)
				sl->h2 &= ~H2_REF; /* second chance */
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

/* Reclaiming elsewhere is shared out by a per-thread call counter. */
static __thread unsigned reclaim_tick;

/* Every RECLAIM_AWAY_EVERY calls, after its own shard is unlocked, a thread
 * sweeps part of another shard (round-robin; skipped when busy). */
static void reclaim_elsewhere(sluice_memstore_t *m, int64_t now_us)
{
	shard_t *s;

	if (m->nshards < 2 || ++reclaim_tick % RECLAIM_AWAY_EVERY != 0)
		return;
	s = &m->shards[(reclaim_tick / RECLAIM_AWAY_EVERY) & (m->nshards - 1)];
	if (pthread_mutex_trylock(&s->lock) != 0)
		return;
	reclaim_step(s, now_us, RECLAIM_AWAY);
	pthread_mutex_unlock(&s->lock);
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
		s->slots = slots_alloc(MIN_SLOTS);
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
				if (s->slots[j].h1)
					slot_clear(&s->slots[j]);
		slots_free(s->slots, s->mask + 1);
		pthread_mutex_destroy(&s->lock);
	}
	free(m);
}

/* Stores states for a key that has none yet.  On allocation failure the
 * decision stands but the state is not kept (fails open, never crashes). */
static void insert(shard_t *s, uint64_t h1, uint64_t h2,
		   const sluice_state_t *states, size_t n, int64_t now_us)
{
	slot_t sl;

	if (s->count >= s->max)
		evict_one(s, now_us);
	if ((s->count + 1) * 4 > (s->mask + 1) * 3 && grow(s) != 0)
		return;
	sl.h1 = h1;
	sl.h2 = (h2 & H2_ID) | H2_REF;
	if (n == 1) {
		sl.u.state = states[0];
	} else {
		sl.u.multi = malloc(sizeof(multi_t) + n * sizeof(states[0]));
		if (!sl.u.multi)
			return;
		sl.u.multi->n = n;
		memcpy(sl.u.multi->states, states, n * sizeof(states[0]));
		sl.h2 |= H2_MULTI;
	}
	place(s->slots, s->mask, &sl);
	s->count++;
}

/* The states a slot holds for nlimits limits, or NULL when it holds a
 * different number (the key's limits changed with a new config). */
static sluice_state_t *slot_states(slot_t *sl, size_t nlimits)
{
	if (!(sl->h2 & H2_MULTI))
		return nlimits == 1 ? &sl->u.state : NULL;
	return sl->u.multi->n == nlimits ? sl->u.multi->states : NULL;
}

int sluice_memstore_take(sluice_memstore_t *m, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits,
			 uint64_t cost, int64_t now_us,
			 sluice_decision_t *decisions,
			 sluice_decision_t *summary)
{
	sluice_state_t cur[MAX_STATES], next[MAX_STATES], *have = NULL;
	sluice_decision_t local[MAX_STATES], sum;
	uint64_t h[2], h1, h2;
	shard_t *s;
	slot_t *sl;
	int allowed;

	if (nlimits == 0 || nlimits > MAX_STATES || (!key && keylen))
		return SLUICE_EINVAL;
	if (!decisions)
		decisions = local;
	sluice_siphash13_128(m->seed, key, keylen, h);
	h1 = h[0];
	h2 = h[1];
	h1 += !h1; /* 0 marks an empty slot */
	s = &m->shards[m->nshards > 1 ? h1 >> m->shift : 0];

	pthread_mutex_lock(&s->lock);
	sl = find(s, h1, h2);
	if (sl && !(have = slot_states(sl, nlimits))) {
		/* The key's limits changed (a new config): start afresh. */
		remove_at(s, (size_t)(sl - s->slots));
		sl = NULL;
	}
	if (have)
		memcpy(cur, have, nlimits * sizeof(cur[0]));
	else
		memset(cur, 0, nlimits * sizeof(cur[0]));

	allowed = sluice_eval_all(limits, cur, nlimits, now_us, cost, next,
				  decisions, &sum);
	if (have) {
		memcpy(have, next, nlimits * sizeof(next[0]));
		sl->h2 |= H2_REF;
	} else if (allowed && cost > 0) {
		insert(s, h1, h2, next, nlimits, now_us);
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

/* ------------------------------------------------- several keys at once */

/*
 * sluice_memstore_take_many(): the shards of every item are locked
 * together, in ascending order (so two takes over overlapping shards can
 * never wait on each other in a cycle), the items are decided on the
 * states as they are, and only when every one passes are their new states
 * written.  Between the first lock and the last unlock no other take sees
 * any of these keys, which is what makes the verdict all-or-nothing under
 * any number of threads.
 */

#define MANY_STACK 16

typedef struct many_s {
	uint64_t h1, h2;
	size_t shard;
	long prev;	      /* an earlier item with the same key, or -1 */
	sluice_state_t *next; /* its would-be states */
} many_t;

static int many_check(const sluice_take_item_t *items, size_t n, size_t *total)
{
	size_t i;

	*total = 0;
	for (i = 0; i < n; i++) {
		const sluice_take_item_t *it = &items[i];

		if (it->nlimits == 0 || it->nlimits > MAX_STATES ||
		    !it->limits || (!it->key && it->keylen))
			return SLUICE_EINVAL;
		*total += it->nlimits;
	}
	return 0;
}

/* Hashes every item, links repeated keys; returns the shards to lock. */
static int many_prepare(sluice_memstore_t *m, const sluice_take_item_t *items,
			size_t n, many_t *k, sluice_state_t *states,
			uint64_t *shards)
{
	size_t i, j, off = 0;

	*shards = 0;
	for (i = 0; i < n; i++) {
		uint64_t h[2];

		sluice_siphash13_128(m->seed, items[i].key, items[i].keylen, h);
		k[i].h1 = h[0] + !h[0]; /* 0 marks an empty slot */
		k[i].h2 = h[1];
		k[i].shard = m->nshards > 1 ? k[i].h1 >> m->shift : 0;
		k[i].next = states + off;
		off += items[i].nlimits;
		k[i].prev = -1;
		for (j = i; j-- > 0;)
			if (k[j].h1 == k[i].h1 &&
			    ((k[j].h2 ^ k[i].h2) & H2_ID) == 0) {
				if (items[j].nlimits != items[i].nlimits)
					return SLUICE_EINVAL;
				k[i].prev = (long)j;
				break;
			}
		*shards |= UINT64_C(1) << k[i].shard;
	}
	return 0;
}

/* Decides item i on its key's current state (or the state an earlier item
 * of the same key left); returns 1 when its limits allow. */
static int many_decide(sluice_memstore_t *m, sluice_take_item_t *it,
		       const many_t *k, const many_t *all, int64_t now_us)
{
	sluice_state_t cur[MAX_STATES], *have = NULL;
	sluice_decision_t dec[MAX_STATES];
	size_t j;
	slot_t *sl;

	if (k->prev >= 0) {
		have = all[k->prev].next;
	} else if ((sl = find(&m->shards[k->shard], k->h1, k->h2))) {
		have = slot_states(sl, it->nlimits);
	}
	if (have)
		memcpy(cur, have, it->nlimits * sizeof(cur[0]));
	else
		memset(cur, 0, it->nlimits * sizeof(cur[0]));
	it->allowed = sluice_eval_all(it->limits, cur, it->nlimits, now_us,
				      it->cost, k->next, dec, NULL);
	it->summary = dec[0];
	it->which = 0;
	for (j = 1; j < it->nlimits; j++)
		if (sluice_decision_merge(&it->summary, &dec[j]))
			it->which = j;
	return it->allowed;
}

/* Writes item i's new states (looked up again: an insert for an earlier
 * item may have moved or evicted slots of this shard). */
static void many_commit(sluice_memstore_t *m, const sluice_take_item_t *it,
			const many_t *k, int64_t now_us)
{
	shard_t *s = &m->shards[k->shard];
	sluice_state_t *have = NULL;
	slot_t *sl = find(s, k->h1, k->h2);

	if (sl && !(have = slot_states(sl, it->nlimits))) {
		/* The key's limits changed (a new config): start afresh. */
		remove_at(s, (size_t)(sl - s->slots));
		sl = NULL;
	}
	if (have) {
		memcpy(have, k->next, it->nlimits * sizeof(k->next[0]));
		sl->h2 |= H2_REF;
	} else if (it->cost > 0) {
		insert(s, k->h1, k->h2, k->next, it->nlimits, now_us);
	}
}

int sluice_memstore_take_many(sluice_memstore_t *m, sluice_take_item_t *items,
			      size_t n, int64_t now_us)
{
	many_t stack_k[MANY_STACK], *k = stack_k;
	sluice_state_t stack_s[MANY_STACK * 4], *states = stack_s;
	uint64_t shards;
	size_t i, total;
	int all = 1, rc;

	if ((rc = many_check(items, n, &total)) < 0)
		return rc;
	if (n == 0)
		return 1;
	if (n > MANY_STACK)
		k = malloc(n * sizeof(*k));
	if (total > MANY_STACK * 4)
		states = malloc(total * sizeof(*states));
	if (!k || !states) {
		rc = SLUICE_ENOMEM;
		goto out;
	}
	if ((rc = many_prepare(m, items, n, k, states, &shards)) < 0)
		goto out;

	for (i = 0; i < m->nshards; i++)
		if (shards >> i & 1)
			pthread_mutex_lock(&m->shards[i].lock);
	for (i = 0; i < n; i++)
		if (!many_decide(m, &items[i], &k[i], k, now_us))
			all = 0;
	if (all)
		for (i = 0; i < n; i++)
			many_commit(m, &items[i], &k[i], now_us);
	for (i = m->nshards; i-- > 0;)
		if (shards >> i & 1) {
			reclaim_step(&m->shards[i], now_us, RECLAIM_STEP);
			pthread_mutex_unlock(&m->shards[i].lock);
		}
	reclaim_elsewhere(m, now_us);
	rc = all;
out:
	if (k != stack_k)
		free(k);
	if (states != stack_s)
		free(states);
	return rc;
}
