/*
 * memory.c -- the embedded store: bucket states in this process's memory,
 * in the bucket table of buckets_*.c (identity and shards are described in
 * buckets_table.c, eviction and expiry in buckets_expiry.c).  Each shard's slot
 * array starts small and doubles as it fills; from the size at which all
 * shards' arrays of one size fill a huge page, they live side by side in the
 * store's arena (buckets.h), so that a probe into a large table costs no page
 * walk.
 */
#include "store/buckets.h"
#include "util/aeshash.h"
#include "util/errmsg.h"
#include "util/siphash.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_SLOTS 16

typedef struct mem_shard_s {
	pthread_mutex_t lock;
	sluice_table_t t;
	char pad[64]; /* keep neighbouring locks off one cache line */
} mem_shard_t;

struct sluice_memstore_s {
	sluice_buckets_t b;
	uint8_t seed[16];
	sluice_aeshash_t aes; /* the hash of keys up to 16 bytes, if any */
	sluice_arena_t arena; /* the shards' larger slot arrays */
	sluice_shard_t views[SLUICE_MAX_SHARDS];
	mem_shard_t shards[];
};

int sluice_memstore_open(sluice_memstore_t **out, size_t max_keys, char *err,
			 size_t errlen)
{
	sluice_memstore_t *m;
	unsigned bits;
	size_t n, i;

	if (!out)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "memory store: out is NULL");
	*out = NULL;
	if (max_keys == 0)
		return sluice_fail(SLUICE_ERANGE, err, errlen,
				   "memory store: max_keys must be at least 1");
	n = sluice_buckets_nshards(max_keys, &bits);
	m = calloc(1, sizeof(*m) + n * sizeof(mem_shard_t));
	if (!m)
		return sluice_fail(SLUICE_ENOMEM, err, errlen,
				   "memory store: out of memory");
	sluice_random_bytes(m->seed, sizeof(m->seed));
	m->b.seed = m->seed;
	/* Keys of at most 16 bytes are hashed with AES where the processor
	 * has it (util/aeshash.h): fewer instructions on the single take;
	 * the table lives in this process only, so no other build reads its
	 * hashes. */
	{
		uint8_t k[32];

		sluice_random_bytes(k, sizeof(k));
		if (sluice_aeshash_init(&m->aes, k) == 0)
			m->b.aes = &m->aes;
		memset(k, 0, sizeof(k));
	}
	m->b.nshards = n;
	m->b.shift = 64 - bits;
	m->b.max_keys = max_keys;
	m->b.shards = m->views;
	/* The largest array a shard grows to holds its share of max_keys
	 * at most 3/4 full. */
	sluice_arena_init(&m->arena, n,
			  sluice_buckets_fixed_slots(max_keys / n + 1));
	for (i = 0; i < n; i++) {
		mem_shard_t *s = &m->shards[i];
		sluice_shard_t *v = &m->views[i];

		pthread_mutex_init(&s->lock, NULL);
		s->t.max = max_keys / n + (i < max_keys % n);
		s->t.mask = FIRST_SLOTS - 1;
		v->lock = &s->lock;
		v->t = &s->t;
		v->mask = s->t.mask;
		v->max = s->t.max;
		v->can_grow = 1;
		v->arena = &m->arena;
		v->index = i;
		v->slots = sluice_shard_slots_alloc(v, FIRST_SLOTS);
		if (!v->slots) {
			sluice_memstore_free(m);
			return sluice_fail(SLUICE_ENOMEM, err, errlen,
					   "memory store: out of memory");
		}
	}
	*out = m;
	return 0;
}

void sluice_memstore_free(sluice_memstore_t *m)
{
	size_t i;

	if (!m)
		return;
	for (i = 0; i < m->b.nshards; i++) {
		/* An array the arena holds goes with it. */
		if (m->views[i].slots)
			sluice_shard_slots_free(&m->views[i], m->views[i].slots,
						m->shards[i].t.mask + 1);
		pthread_mutex_destroy(&m->shards[i].lock);
	}
	sluice_arena_free(&m->arena);
	free(m);
}

int sluice_memstore_take(sluice_memstore_t *m, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits,
			 uint64_t cost, int64_t now_us,
			 sluice_decision_t *decisions,
			 sluice_decision_t *summary)
{
	return sluice_buckets_take(&m->b, key, keylen, limits, nlimits, cost,
				   now_us, decisions, summary);
}

int sluice_memstore_take_many(sluice_memstore_t *m, sluice_take_item_t *items,
			      size_t n, int64_t now_us)
{
	return sluice_buckets_take_many(&m->b, items, n, now_us);
}

int sluice_memstore_take_each(sluice_memstore_t *m, sluice_take_item_t *items,
			      size_t n, int64_t now_us)
{
	return sluice_buckets_take_each(&m->b, items, n, now_us);
}

void sluice_memstore_stats(sluice_memstore_t *m, sluice_memstore_stats_t *out)
{
	sluice_buckets_stats(&m->b, out);
}

int sluice_memstore_reset(sluice_memstore_t *m, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits)
{
	return sluice_buckets_reset(&m->b, key, keylen, limits, nlimits);
}

int sluice_memstore_refund(sluice_memstore_t *m, const void *key, size_t keylen,
			   const sluice_limit_t *limits, size_t nlimits,
			   uint64_t cost, int64_t now_us)
{
	return sluice_buckets_refund(&m->b, key, keylen, limits, nlimits, cost,
				     now_us);
}

int sluice_memstore_peek(sluice_memstore_t *m, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits,
			 uint64_t cost, int64_t now_us,
			 sluice_decision_t *decisions,
			 sluice_decision_t *summary)
{
	return sluice_buckets_peek(&m->b, key, keylen, limits, nlimits, cost,
				   now_us, decisions, summary);
}

int sluice_memstore_penalize(sluice_memstore_t *m, const void *key,
			     size_t keylen, const sluice_limit_t *limits,
			     size_t nlimits, uint64_t cost, int64_t now_us)
{
	return sluice_buckets_adjust(&m->b, key, keylen, limits, nlimits, 0,
				     cost, now_us);
}

int sluice_memstore_block(sluice_memstore_t *m, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits,
			  uint64_t ms, int64_t now_us)
{
	return sluice_buckets_adjust(&m->b, key, keylen, limits, nlimits, 1, ms,
				     now_us);
}

int sluice_memstore_carry(sluice_memstore_t *m, const void *key, size_t keylen,
			  const sluice_limit_t *to, const sluice_limit_t *from,
			  size_t nfrom, int64_t now_us)
{
	return sluice_buckets_carry(&m->b, key, keylen, to, from, nfrom,
				    now_us);
}

int sluice_memstore_reserve(sluice_memstore_t *m, const void *key,
			    size_t keylen, const sluice_limit_t *limits,
			    size_t nlimits, uint64_t cost, uint64_t max_wait_us,
			    int64_t now_us, sluice_decision_t *summary,
			    uint64_t *wait_us)
{
	return sluice_buckets_reserve(&m->b, key, keylen, limits, nlimits, cost,
				      max_wait_us, now_us, summary, wait_us,
				      NULL);
}

int sluice_memstore_reserve_left(sluice_memstore_t *m, const void *key,
				 size_t keylen, const sluice_limit_t *limits,
				 size_t nlimits, uint64_t cost,
				 uint64_t max_wait_us, int64_t now_us,
				 sluice_decision_t *summary, uint64_t *wait_us,
				 sluice_state_t *left)
{
	return sluice_buckets_reserve(&m->b, key, keylen, limits, nlimits, cost,
				      max_wait_us, now_us, summary, wait_us,
				      left);
}

int sluice_memstore_refund_if(sluice_memstore_t *m, const void *key,
			      size_t keylen, const sluice_limit_t *limits,
			      size_t nlimits, uint64_t cost,
			      const sluice_state_t *expected, int64_t now_us)
{
	return sluice_buckets_refund_if(&m->b, key, keylen, limits, nlimits,
					cost, expected, now_us);
}

int sluice_memstore_set(sluice_memstore_t *m, const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits,
			uint64_t remaining, int64_t now_us)
{
	return sluice_buckets_set(&m->b, key, keylen, limits, nlimits,
				  remaining, now_us);
}
