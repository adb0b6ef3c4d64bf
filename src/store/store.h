/*
 * store.h -- the stores a verdict is decided on, behind one interface.
 *
 * A *store driver* (sluice_store_ops_t) charges a request's keys: the
 * memory store and the host's shared-memory store (store_local.c), the
 * Redis store (store_redis.c, over include/sluice_redis.h).  Every host
 * opens its store through sluice_backend_open() or _open_events()
 * (store.c) and calls it through `ops` alone: `sluice serve`'s verdict
 * engine (policy/verdict.h) and gRPC front end, the simulator, and the
 * Node addon (bindings/node/src).  Adding a store is one driver file and
 * one case in sluice_backend_open_events(): every host then has it (its
 * settings: a field of store_config.h, read from the YAML by the config
 * code and from a Limiter's options by the addon's config.c).
 *
 * Every call has one shape: items (sluice_take_item_t: key, limits,
 * cost; outputs written by take and peek) with a callback that runs once
 * when the call returns 0, never when it returns a negative code.
 * Ownership: the items (keys, limits) are the caller's and must stay
 * valid, and unchanged, until the callback has run; the driver writes
 * only their outputs.  The callback may run before the call returns (the
 * local stores always do: a host may rely on that for them, and the Node
 * addon's memory and shared stores answer JS synchronously so).  take()
 * charges several keys all-or-nothing, atomically with respect to every
 * other take on the same store: it has the shape of
 * sluice_redis_take_many(), asynchronous, one callback per call; one item
 * (a single-key take, the common case) goes the single-key way in every
 * driver (no many-key bookkeeping, the same wire command as
 * sluice_redis_take()).  Each event-loop thread owns its own driver
 * instance.
 *
 * What a store says (a Redis client's events and per-node reports) goes
 * to the events given when its backend opened (sluice_store_events_t:
 * one Node Limiter's own), else to the process's hooks
 * (sluice_store_set_hooks(): `sluice serve`'s log and metrics).
 */
#ifndef SLUICE_STORE_STORE_H
#define SLUICE_STORE_STORE_H

#include "sluice.h"
#include "sluice_redis.h"
#include "store/store_config.h"

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------- store drivers */

/* status 0 or a negative SLUICE_E*; when 0, allowed is 1 when every item
 * was charged and each item's outputs are set. */
typedef void (*sluice_store_cb)(void *arg, int status, int allowed);
/* A reservation's answer: status 0 with *res, or a negative SLUICE_E*
 * with res NULL. */
typedef void (*sluice_store_reserve_cb)(void *arg, int status,
					const sluice_reservation_t *res);

/* One key's usage to carry to a changed limit (the carry verb): the limit
 * `to` it has now, the limits from[0..nfrom) it had (the most recent
 * first, at most SLUICE_MAX_LIMITS).  See sluice_memstore_carry(). */
typedef struct sluice_carry_item_s {
	const void *key;
	size_t keylen;
	const sluice_limit_t *to;
	const sluice_limit_t *from;
	size_t nfrom;
} sluice_carry_item_t;

/* One bucket to start with another limiter's count (the import verb):
 * the bucket of key under limit, and the name of the counter in the
 * store (envoyproxy/ratelimit's fixed-window key), which lives about
 * window_ms.  See sluice_redis_import(). */
typedef struct sluice_import_item_s {
	const void *key;
	size_t keylen;
	const sluice_limit_t *limit;
	const char *counter;
	size_t counterlen;
	uint64_t window_ms;
} sluice_import_item_t;

typedef struct sluice_store_ops_s {
	const char *name; /* "memory", "redis" */
	/* Charges items[0..n) all-or-nothing (see
	 * sluice_memstore_take_many()).  now_us is the caller's clock; a
	 * store with a clock of its own (Redis) uses its own.  items stay
	 * valid until cb.  Returns 0 (cb will run, possibly already has) or
	 * a negative code (cb will not run). */
	int (*take)(void *impl, sluice_take_item_t *items, size_t n,
		    int64_t now_us, sluice_store_cb cb, void *arg);
	/* Admin verbs, on items[0..n) (key and limits; cost for refund):
	 * reset makes the buckets full, refund gives cost back (never
	 * beyond full).  cb's `allowed` is unused.  Same return as take. */
	int (*reset)(void *impl, sluice_take_item_t *items, size_t n,
		     sluice_store_cb cb, void *arg);
	int (*refund)(void *impl, sluice_take_item_t *items, size_t n,
		      int64_t now_us, sluice_store_cb cb, void *arg);
	/* The decision each item would get now (its outputs written),
	 * charging nothing; cb's `allowed`: every item would pass.  The
	 * Redis store peeks one item per call (n 1, else SLUICE_EINVAL).
	 * Same return as take; NULL: the store cannot peek. */
	int (*peek)(void *impl, sluice_take_item_t *items, size_t n,
		    int64_t now_us, sluice_store_cb cb, void *arg);
	/* More admin verbs, as refund: penalize charges each item's cost
	 * with no check (sluice_penalize()), block lets no take of the
	 * items' buckets pass for ms milliseconds (sluice_block()). */
	int (*penalize)(void *impl, sluice_take_item_t *items, size_t n,
			int64_t now_us, sluice_store_cb cb, void *arg);
	int (*block)(void *impl, sluice_take_item_t *items, size_t n,
		     uint64_t ms, int64_t now_us, sluice_store_cb cb,
		     void *arg);
	/* 1 when the store can answer (for /readyz); NULL: always. */
	int (*healthy)(void *impl);
	/* Store-specific counters for /metrics, may be NULL. */
	void (*stats)(void *impl, sluice_memstore_stats_t *out);
	/* Pending calls fail (SLUICE_ESTORE), each callback once, before
	 * free returns; what they borrowed is the caller's again.  Whatever
	 * the store keeps on the loop (the Redis client's handles) is
	 * released once the loop has run again. */
	void (*free)(void *impl);
	/* As free, then done(arg) once everything is released (from the
	 * loop, later: a host tearing its loop down waits for it); NULL:
	 * the store holds nothing on a loop, free then done at once. */
	void (*free_then)(void *impl, void (*done)(void *arg), void *arg);
	/* The synchronous path of a store that answers at once (the local
	 * stores; NULL for the others): one item taken, or peeked when peek
	 * is 1, as take() / peek() decide it, the outputs written and the
	 * answer returned instead of called back: 1 allowed, 0 not, or a
	 * negative code.  For a host's hottest path (the Node addon's
	 * memory store: no callback, no answer to carry). */
	int (*take_now)(void *impl, sluice_take_item_t *item, int64_t now_us,
			int peek);
	/* Carries each item's usage to its changed limit
	 * (sluice_memstore_carry(): what was used stays used), before a
	 * take that follows it: a host calls it when the config that chose
	 * the limit replaced one with other limits.  Items are read during
	 * the call only (a store that answers later has written its command
	 * by then), and a take issued after it on the same driver sees the
	 * carried state.  cb's `allowed` is unused.  Same return as take;
	 * NULL: the store cannot carry. */
	int (*carry)(void *impl, const sluice_carry_item_t *items, size_t n,
		     int64_t now_us, sluice_store_cb cb, void *arg);
	/* A reservation of one item (its key, limits, cost): charged now,
	 * into debt if need be, answering the wait until its turn; refused,
	 * charging nothing, when the turn is later than max_wait_us
	 * (sluice_reserve_all(), atomic with every take of the key; on
	 * Redis at the server's clock).  cb once, as take's.  NULL: the
	 * store cannot reserve. */
	int (*reserve)(void *impl, const sluice_take_item_t *item,
		       uint64_t max_wait_us, int64_t now_us,
		       sluice_store_reserve_cb cb, void *arg);
	/* An admin verb, as block: each item's buckets hold `remaining`
	 * whole tokens from now (sluice_set_remaining()). */
	int (*set)(void *impl, sluice_take_item_t *items, size_t n,
		   uint64_t remaining, int64_t now_us, sluice_store_cb cb,
		   void *arg);
	/* Starts each item's bucket, when it holds no state and was not
	 * imported in the counter's window, with the counter's value c as
	 * min(c, capacity) tokens used at the store's clock; a bucket with
	 * state is never touched, so repeating it is harmless.  As carry:
	 * items are read during the call only, a take issued after it on
	 * the same driver sees its state; cb's `allowed` is 1 when some
	 * usage was imported.  NULL: the store cannot import (the local
	 * stores: nothing else counts in them). */
	int (*import)(void *impl, const sluice_import_item_t *items, size_t n,
		      int64_t now_us, sluice_store_cb cb, void *arg);
	/* A conditional refund of one item (key, limits, cost): the cost
	 * given back only while every bucket still holds expected[i] (for
	 * item->limits[i]; a reservation's sluice_reservation_t.states),
	 * atomically (sluice_refund_if(); on Redis at the server's clock).
	 * cb's `allowed`: 1 refunded, 0 not (charged since: nothing given
	 * back).  expected is read during the call only.  Same return as
	 * take; NULL: the store cannot. */
	int (*refund_if)(void *impl, const sluice_take_item_t *item,
			 const sluice_state_t *expected, int64_t now_us,
			 sluice_store_cb cb, void *arg);
} sluice_store_ops_t;

typedef struct sluice_backend_s {
	const sluice_store_ops_t *ops;
	void *impl;
	/* The memory store for on_store_error: local (shared by threads;
	 * for the memory driver it is the store itself). */
	sluice_memstore_t *local;
} sluice_backend_t;

/* What the stores say to their host (the server's log and metrics):
 * set once per process, before the first store opens; until then (and
 * for any NULL member) a store says nothing.  The hooks are called on
 * the thread of the store's caller. */
typedef struct sluice_store_hooks_s {
	/* An error in words (a failing shared store; each said once). */
	void (*log_error)(const char *msg);
	/* One Redis client's events and per-node reports
	 * (sluice_redis_opts_t.on_event, on_report), with the arg that
	 * attach returned when the client opened (NULL allowed); detach
	 * runs when the client is freed. */
	void (*on_event)(void *arg, const sluice_redis_event_t *ev);
	void (*on_report)(void *arg, const sluice_redis_node_report_t *rep);
	void *(*attach)(void);
	void (*detach)(void *arg);
} sluice_store_hooks_t;

/* What a store adds to GET /metrics (its own series, Prometheus text)
 * and to the body of /readyz's 503 (`,"nodes":[...]`): the Redis store's
 * is sluice_redis_exposition (store_redis_metrics.h).  The host shows
 * it; either member may be NULL. */
struct sluice_buf_s; /* util/buf.h */
typedef struct sluice_store_exposition_s {
	void (*render)(struct sluice_buf_s *out);
	void (*unready)(struct sluice_buf_s *out);
} sluice_store_exposition_t;

/* Where one backend's store speaks instead of the process's hooks (a
 * host with several stores, each heard by its own owner: a Node
 * Limiter's 'error' events and lastError).  The Redis client's events
 * and per-node reports, with arg; NULL members: not heard.  Must outlive
 * the backend; called on the backend's loop thread.  A failing local
 * store still says so through the process's log_error hook. */
typedef struct sluice_store_events_s {
	void (*on_event)(void *arg, const sluice_redis_event_t *ev);
	void (*on_report)(void *arg, const sluice_redis_node_report_t *rep);
	void *arg;
} sluice_store_events_t;

/* Keeps `hooks` (which must outlive every store) for the stores opened
 * from now on; NULL: none. */
void sluice_store_set_hooks(const sluice_store_hooks_t *hooks);
const sluice_store_hooks_t *sluice_store_hooks(void);

/* Opens the driver configured in `store` for one event-loop thread
 * (`loop`, a uv_loop_t: the Redis store's; NULL for the local stores).
 * `shared` is the process-wide memory store, `shm` the host's
 * shared-memory store (opened once per process and shared by its
 * threads, as `sluice serve` does; NULL unless the store is shared).
 * When the store is the memory or shared one and the host passes none,
 * the backend opens its own from `store` (max_keys; shm_path, shm_group)
 * and closes it with itself (the Node addon: one per Limiter); a shared
 * store that cannot be opened gives the store's own message, naming the
 * file.  The Redis client's events go to the process's hooks.  Returns 0
 * or a negative code with a message. */
int sluice_backend_open(sluice_backend_t *be,
			const sluice_store_config_t *store, void *loop,
			sluice_memstore_t *shared, sluice_shmstore_t *shm,
			char *err, size_t errlen);
/* As sluice_backend_open(), with the store's events to `events`
 * (NULL: the process's hooks, as sluice_backend_open()). */
int sluice_backend_open_events(sluice_backend_t *be,
			       const sluice_store_config_t *store, void *loop,
			       sluice_memstore_t *shared,
			       sluice_shmstore_t *shm,
			       const sluice_store_events_t *events, char *err,
			       size_t errlen);
/* As sluice_backend_open_events(), for a host whose event loop is not
 * libuv (the nginx module): a Redis store runs on `loop`, the host's
 * table (sluice_loop.h), which must outlive the backend (until the done
 * of sluice_backend_close_then()).  The local stores ignore it. */
int sluice_backend_open_loop(sluice_backend_t *be,
			     const sluice_store_config_t *store,
			     sluice_loop_t *loop,
			     const sluice_store_events_t *events, char *err,
			     size_t errlen);
/* Frees the driver (ops->free: pending calls fail first, and a local
 * store the backend opened itself is closed); the struct may be opened
 * again. */
void sluice_backend_close(sluice_backend_t *be);
/* As sluice_backend_close(), then done(arg) once the store has released
 * everything (ops->free_then), maybe later, from the loop. */
void sluice_backend_close_then(sluice_backend_t *be, void (*done)(void *arg),
			       void *arg);
int sluice_backend_healthy(sluice_backend_t *be);

/* A backend on a memory store alone (simulate, replay, tests). */
void sluice_backend_memory(sluice_backend_t *be, sluice_memstore_t *store);

/* The memory and shared-memory drivers (store_local.c): over the host's
 * store (left open), and over a store the backend opened itself (_owned:
 * freeing the driver closes the store). */
extern const sluice_store_ops_t sluice_memory_store_ops;
extern const sluice_store_ops_t sluice_shm_store_ops;
extern const sluice_store_ops_t sluice_memory_owned_ops;
extern const sluice_store_ops_t sluice_shm_owned_ops;

/* The Redis driver (store_redis.c): opens one Redis client for `loop`
 * (a uv_loop_t) into *impl; its events to `events`, NULL: the process's
 * hooks. */
extern const sluice_store_ops_t sluice_redis_store_ops;
int sluice_redis_store_open(void **impl, const sluice_store_config_t *store,
			    void *loop, const sluice_store_events_t *events,
			    char *err, size_t errlen);
/* As sluice_redis_store_open(), on a host's loop table. */
int sluice_redis_store_open_loop(void **impl,
				 const sluice_store_config_t *store,
				 sluice_loop_t *loop,
				 const sluice_store_events_t *events, char *err,
				 size_t errlen);

#endif /* SLUICE_STORE_STORE_H */
