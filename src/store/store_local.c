/*
 * store_local.c -- the drivers of the stores in this process's memory:
 * the memory store and the host's shared-memory store.
 */
#include "store/shm.h"
#include "store/store.h"
#include "util/invariant.h"

#include <stdio.h>
#include <string.h>

static void say_error(const char *msg)
{
	const sluice_store_hooks_t *h = sluice_store_hooks();

	if (h->log_error)
		h->log_error(msg);
}

/* ----------------------------------------------------------- local stores */

/* The memory store and the host's shared-memory store have the same calls
 * on a different handle: one driver over a table of them.  Both answer at
 * once, so every callback runs before the driver's call returns. */
typedef struct {
	int (*take_many)(void *s, sluice_take_item_t *items, size_t n,
			 int64_t now_us);
	int (*reset)(void *s, const void *key, size_t keylen,
		     const sluice_limit_t *limits, size_t nlimits);
	int (*refund)(void *s, const void *key, size_t keylen,
		      const sluice_limit_t *limits, size_t nlimits,
		      uint64_t cost, int64_t now_us);
	int (*penalize)(void *s, const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits,
			uint64_t cost, int64_t now_us);
	int (*block)(void *s, const void *key, size_t keylen,
		     const sluice_limit_t *limits, size_t nlimits, uint64_t ms,
		     int64_t now_us);
	void (*stats)(void *s, sluice_memstore_stats_t *out);
	int (*carry)(void *s, const void *key, size_t keylen,
		     const sluice_limit_t *to, const sluice_limit_t *from,
		     size_t nfrom, int64_t now_us);
	/* A failure (SLUICE_ESTORE) to say; NULL: none to say. */
	void (*failed)(void *s);
	/* One item taken (peek 0) or peeked at once, its outputs written,
	 * the failure said: the driver's take_now, take's common case, peek. */
	int (*now)(void *s, sluice_take_item_t *it, int64_t now_us, int peek);
	int (*reserve)(void *s, const sluice_take_item_t *it,
		       uint64_t max_wait_us, int64_t now_us,
		       sluice_reservation_t *res);
	int (*set)(void *s, const void *key, size_t keylen,
		   const sluice_limit_t *limits, size_t nlimits,
		   uint64_t remaining, int64_t now_us);
	int (*refund_if)(void *s, const sluice_take_item_t *it,
			 const sluice_state_t *expected, int64_t now_us);
} local_calls_t;

/* A failing shared store is said in the log: once when the file shrank
 * under the mapping (every call fails from then on), and once for a lock
 * held too long (which may pass); the metrics count every failure. */
static void shm_log_failure(void *impl)
{
	static int said_shrunk, said_lock;
	sluice_shmstore_t *shm = impl;

	if (sluice_shmstore__failed(shm)) {
		if (!__atomic_exchange_n(&said_shrunk, 1, __ATOMIC_RELAXED))
			say_error("store.shared: the file shrank under its "
				  "mapping (truncated, or its tmpfs is full); "
				  "every decision now follows on_store_error "
				  "until a restart, which refuses the damaged "
				  "file");
	} else if (!__atomic_exchange_n(&said_lock, 1, __ATOMIC_RELAXED)) {
		say_error("store.shared: a shard's lock was not "
			  "released within 10 s (a stopped process, or "
			  "a damaged file); such decisions follow "
			  "on_store_error");
	}
}

/* The calls of one local store, typed for the table: `type` is the
 * store's handle, `prefix` its functions' names (sluice.h). */
#define LOCAL_CALLS(name, prefix, type, on_failure)                            \
	static int name##_take_many(void *s, sluice_take_item_t *items,        \
				    size_t n, int64_t now_us)                  \
	{                                                                      \
		return prefix##_take_many((type *)s, items, n, now_us);        \
	}                                                                      \
	static int name##_reset1(void *s, const void *key, size_t keylen,      \
				 const sluice_limit_t *limits, size_t nlimits) \
	{                                                                      \
		return prefix##_reset((type *)s, key, keylen, limits,          \
				      nlimits);                                \
	}                                                                      \
	static int name##_refund1(void *s, const void *key, size_t keylen,     \
				  const sluice_limit_t *limits,                \
				  size_t nlimits, uint64_t cost,               \
				  int64_t now_us)                              \
	{                                                                      \
		return prefix##_refund((type *)s, key, keylen, limits,         \
				       nlimits, cost, now_us);                 \
	}                                                                      \
	static int name##_penalize1(void *s, const void *key, size_t keylen,   \
				    const sluice_limit_t *limits,              \
				    size_t nlimits, uint64_t cost,             \
				    int64_t now_us)                            \
	{                                                                      \
		return prefix##_penalize((type *)s, key, keylen, limits,       \
					 nlimits, cost, now_us);               \
	}                                                                      \
	static int name##_block1(void *s, const void *key, size_t keylen,      \
				 const sluice_limit_t *limits, size_t nlimits, \
				 uint64_t ms, int64_t now_us)                  \
	{                                                                      \
		return prefix##_block((type *)s, key, keylen, limits, nlimits, \
				      ms, now_us);                             \
	}                                                                      \
	/* The store's own call, straight (the hottest path: no table). */     \
	static int name##_now(void *s, sluice_take_item_t *it, int64_t now_us, \
			      int peek)                                        \
	{                                                                      \
		void (*failed)(void *) = on_failure;                           \
		int r = peek ? prefix##_peek((type *)s, it->key, it->keylen,   \
					     it->limits, it->nlimits,          \
					     it->cost, now_us, NULL,           \
					     &it->summary)                     \
			     : prefix##_take((type *)s, it->key, it->keylen,   \
					     it->limits, it->nlimits,          \
					     it->cost, now_us, NULL,           \
					     &it->summary);                    \
		if (r >= 0)                                                    \
			it->allowed = r;                                       \
		else if (r == SLUICE_ESTORE && failed)                         \
			failed(s);                                             \
		return r;                                                      \
	}                                                                      \
	static void name##_stats1(void *s, sluice_memstore_stats_t *out)       \
	{                                                                      \
		prefix##_stats((type *)s, out);                                \
	}                                                                      \
	static int name##_reserve1(void *s, const sluice_take_item_t *it,      \
				   uint64_t max_wait_us, int64_t now_us,       \
				   sluice_reservation_t *res)                  \
	{                                                                      \
		res->now_us = now_us;                                          \
		return prefix##_reserve_left(                                  \
			(type *)s, it->key, it->keylen, it->limits,            \
			it->nlimits, it->cost, max_wait_us, now_us,            \
			&res->summary, &res->wait_us, res->states);            \
	}                                                                      \
	static int name##_refund_if1(void *s, const sluice_take_item_t *it,    \
				     const sluice_state_t *expected,           \
				     int64_t now_us)                           \
	{                                                                      \
		return prefix##_refund_if((type *)s, it->key, it->keylen,      \
					  it->limits, it->nlimits, it->cost,   \
					  expected, now_us);                   \
	}                                                                      \
	static int name##_set1(void *s, const void *key, size_t keylen,        \
			       const sluice_limit_t *limits, size_t nlimits,   \
			       uint64_t remaining, int64_t now_us)             \
	{                                                                      \
		return prefix##_set((type *)s, key, keylen, limits, nlimits,   \
				    remaining, now_us);                        \
	}                                                                      \
	static int name##_carry1(void *s, const void *key, size_t keylen,      \
				 const sluice_limit_t *to,                     \
				 const sluice_limit_t *from, size_t nfrom,     \
				 int64_t now_us)                               \
	{                                                                      \
		return prefix##_carry((type *)s, key, keylen, to, from, nfrom, \
				      now_us);                                 \
	}                                                                      \
	static const local_calls_t name##_calls = {                            \
		.take_many = name##_take_many,                                 \
		.reset = name##_reset1,                                        \
		.refund = name##_refund1,                                      \
		.penalize = name##_penalize1,                                  \
		.block = name##_block1,                                        \
		.stats = name##_stats1,                                        \
		.carry = name##_carry1,                                        \
		.failed = on_failure,                                          \
		.now = name##_now,                                             \
		.reserve = name##_reserve1,                                    \
		.set = name##_set1,                                            \
		.refund_if = name##_refund_if1,                                \
	}

LOCAL_CALLS(memory, sluice_memstore, sluice_memstore_t, NULL);
LOCAL_CALLS(shm, sluice_shmstore, sluice_shmstore_t, shm_log_failure);

/* A call that failed (r < 0, not SLUICE_EINVAL) and is answered: a
 * shared store says its damage first (its failure hook). */
static void local_failed(const local_calls_t *c, void *impl, int r)
{
	if (r == SLUICE_ESTORE && c->failed)
		c->failed(impl);
}

/* Charges items[0..n): one key (the common case) by the single-key
 * call, the same decision as take_many's with less bookkeeping. */
static int local_take(const local_calls_t *c, void *impl,
		      sluice_take_item_t *items, size_t n, int64_t now_us,
		      sluice_store_cb cb, void *arg)
{
	int r;

	if (n == 1) {
		r = c->now(impl, items, now_us, 0);
	} else {
		r = c->take_many(impl, items, n, now_us);
		local_failed(c, impl, r);
	}
	if (r == SLUICE_EINVAL)
		return r;
	cb(arg, r < 0 ? r : 0, r > 0);
	return 0;
}

enum { OP_RESET, OP_REFUND, OP_PENALIZE, OP_BLOCK };

/* Does the admin verb `op` on each item in turn (ms: block's). */
static int local_each(const local_calls_t *c, void *impl, int op,
		      sluice_take_item_t *items, size_t n, uint64_t ms,
		      int64_t now_us, sluice_store_cb cb, void *arg)
{
	size_t i;
	int r;

	for (i = 0; i < n; i++) {
		const sluice_take_item_t *it = &items[i];

		switch (op) {
		case OP_RESET:
			r = c->reset(impl, it->key, it->keylen, it->limits,
				     it->nlimits);
			break;
		case OP_REFUND:
			r = c->refund(impl, it->key, it->keylen, it->limits,
				      it->nlimits, it->cost, now_us);
			break;
		case OP_PENALIZE:
			r = c->penalize(impl, it->key, it->keylen, it->limits,
					it->nlimits, it->cost, now_us);
			break;
		default:
			SLUICE_ASSERT(op == OP_BLOCK);
			r = c->block(impl, it->key, it->keylen, it->limits,
				     it->nlimits, ms, now_us);
			break;
		}
		if (r < 0)
			return r;
	}
	cb(arg, 0, 1);
	return 0;
}

/* Peeks each item (outputs written); allowed when every item would
 * pass. */
static int local_peek(const local_calls_t *c, void *impl,
		      sluice_take_item_t *items, size_t n, int64_t now_us,
		      sluice_store_cb cb, void *arg)
{
	size_t i;
	int r, all = 1;

	for (i = 0; i < n; i++) {
		sluice_take_item_t *it = &items[i];

		r = c->now(impl, it, now_us, 1);
		if (r == SLUICE_EINVAL)
			return r;
		if (r < 0) {
			cb(arg, r, 0);
			return 0;
		}
		all &= r;
	}
	cb(arg, 0, all);
	return 0;
}

/* A reservation of one item (sluice_reserve_all() under the key's
 * lock), answered at once. */
static int local_reserve(const local_calls_t *c, void *impl,
			 const sluice_take_item_t *item, uint64_t max_wait_us,
			 int64_t now_us, sluice_store_reserve_cb cb, void *arg)
{
	sluice_reservation_t res;
	int r;

	memset(&res, 0, sizeof(res));
	r = c->reserve(impl, item, max_wait_us, now_us, &res);
	if (r == SLUICE_EINVAL)
		return r;
	if (r < 0) {
		local_failed(c, impl, r);
		cb(arg, r, NULL);
		return 0;
	}
	res.reserved = r;
	cb(arg, 0, &res);
	return 0;
}

/* A conditional refund of one item, answered at once. */
static int local_refund_if(const local_calls_t *c, void *impl,
			   const sluice_take_item_t *item,
			   const sluice_state_t *expected, int64_t now_us,
			   sluice_store_cb cb, void *arg)
{
	int r = c->refund_if(impl, item, expected, now_us);

	if (r == SLUICE_EINVAL)
		return r;
	if (r < 0) {
		local_failed(c, impl, r);
		cb(arg, r, 0);
		return 0;
	}
	cb(arg, 0, r);
	return 0;
}

/* Sets each item's buckets to `remaining` tokens. */
static int local_set(const local_calls_t *c, void *impl,
		     sluice_take_item_t *items, size_t n, uint64_t remaining,
		     int64_t now_us, sluice_store_cb cb, void *arg)
{
	size_t i;
	int r;

	for (i = 0; i < n; i++) {
		r = c->set(impl, items[i].key, items[i].keylen, items[i].limits,
			   items[i].nlimits, remaining, now_us);
		if (r < 0)
			return r;
	}
	cb(arg, 0, 1);
	return 0;
}

/* Carries each item's usage to its new limit (sluice_memstore_carry()),
 * in turn. */
static int local_carry(const local_calls_t *c, void *impl,
		       const sluice_carry_item_t *items, size_t n,
		       int64_t now_us, sluice_store_cb cb, void *arg)
{
	size_t i;
	int r;

	for (i = 0; i < n; i++) {
		const sluice_carry_item_t *it = &items[i];

		r = c->carry(impl, it->key, it->keylen, it->to, it->from,
			     it->nfrom, now_us);
		if (r == SLUICE_EINVAL)
			return r;
		if (r < 0) {
			local_failed(c, impl, r);
			cb(arg, r, 0);
			return 0;
		}
	}
	cb(arg, 0, 1);
	return 0;
}

static void local_free(void *impl)
{
	/* The store is shared by every thread and outlives configs (the
	 * process opened it once). */
	(void)impl;
}

/* A driver's table of calls; free: what freeing the driver does to the
 * store. */
#define LOCAL_OPS(store, label, free_fn)                                       \
	{                                                                      \
		.name = label, .take = store##_take, .reset = store##_reset,   \
		.refund = store##_refund, .peek = store##_peek,                \
		.penalize = store##_penalize, .block = store##_block,          \
		.healthy = NULL, .stats = store##_stats1, .free = free_fn,     \
		.free_then = NULL, .take_now = store##_now,                    \
		.reserve = store##_reserve, .set = store##_set,                \
		.carry = store##_carry, .refund_if = store##_refund_if,        \
	}

/* One driver per local store: its ops bind the store's table of calls.
 * Two tables of them: over the host's store (shared by its threads, left
 * open), and over a store the backend opened itself (closed with it:
 * `close` is the store's own).  Adding a local store is one LOCAL_CALLS
 * and one LOCAL_DRIVER. */
#define LOCAL_DRIVER(store, label, type, close)                                \
	static int store##_take(void *impl, sluice_take_item_t *items,         \
				size_t n, int64_t now_us, sluice_store_cb cb,  \
				void *arg)                                     \
	{                                                                      \
		return local_take(&store##_calls, impl, items, n, now_us, cb,  \
				  arg);                                        \
	}                                                                      \
	static int store##_reset(void *impl, sluice_take_item_t *items,        \
				 size_t n, sluice_store_cb cb, void *arg)      \
	{                                                                      \
		return local_each(&store##_calls, impl, OP_RESET, items, n, 0, \
				  0, cb, arg);                                 \
	}                                                                      \
	static int store##_refund(void *impl, sluice_take_item_t *items,       \
				  size_t n, int64_t now_us,                    \
				  sluice_store_cb cb, void *arg)               \
	{                                                                      \
		return local_each(&store##_calls, impl, OP_REFUND, items, n,   \
				  0, now_us, cb, arg);                         \
	}                                                                      \
	static int store##_peek(void *impl, sluice_take_item_t *items,         \
				size_t n, int64_t now_us, sluice_store_cb cb,  \
				void *arg)                                     \
	{                                                                      \
		return local_peek(&store##_calls, impl, items, n, now_us, cb,  \
				  arg);                                        \
	}                                                                      \
	static int store##_penalize(void *impl, sluice_take_item_t *items,     \
				    size_t n, int64_t now_us,                  \
				    sluice_store_cb cb, void *arg)             \
	{                                                                      \
		return local_each(&store##_calls, impl, OP_PENALIZE, items, n, \
				  0, now_us, cb, arg);                         \
	}                                                                      \
	static int store##_block(void *impl, sluice_take_item_t *items,        \
				 size_t n, uint64_t ms, int64_t now_us,        \
				 sluice_store_cb cb, void *arg)                \
	{                                                                      \
		return local_each(&store##_calls, impl, OP_BLOCK, items, n,    \
				  ms, now_us, cb, arg);                        \
	}                                                                      \
	static int store##_reserve(void *impl, const sluice_take_item_t *item, \
				   uint64_t max_wait_us, int64_t now_us,       \
				   sluice_store_reserve_cb cb, void *arg)      \
	{                                                                      \
		return local_reserve(&store##_calls, impl, item, max_wait_us,  \
				     now_us, cb, arg);                         \
	}                                                                      \
	static int store##_refund_if(                                          \
		void *impl, const sluice_take_item_t *item,                    \
		const sluice_state_t *expected, int64_t now_us,                \
		sluice_store_cb cb, void *arg)                                 \
	{                                                                      \
		return local_refund_if(&store##_calls, impl, item, expected,   \
				       now_us, cb, arg);                       \
	}                                                                      \
	static int store##_set(void *impl, sluice_take_item_t *items,          \
			       size_t n, uint64_t remaining, int64_t now_us,   \
			       sluice_store_cb cb, void *arg)                  \
	{                                                                      \
		return local_set(&store##_calls, impl, items, n, remaining,    \
				 now_us, cb, arg);                             \
	}                                                                      \
	static int store##_carry(void *impl, const sluice_carry_item_t *items, \
				 size_t n, int64_t now_us, sluice_store_cb cb, \
				 void *arg)                                    \
	{                                                                      \
		return local_carry(&store##_calls, impl, items, n, now_us, cb, \
				   arg);                                       \
	}                                                                      \
	static void store##_close(void *impl)                                  \
	{                                                                      \
		close((type *)impl);                                           \
	}                                                                      \
	const sluice_store_ops_t sluice_##store##_store_ops =                  \
		LOCAL_OPS(store, label, local_free);                           \
	const sluice_store_ops_t sluice_##store##_owned_ops =                  \
		LOCAL_OPS(store, label, store##_close)

LOCAL_DRIVER(memory, "memory", sluice_memstore_t, sluice_memstore_free);
LOCAL_DRIVER(shm, "shared", sluice_shmstore_t, sluice_shmstore_close);
