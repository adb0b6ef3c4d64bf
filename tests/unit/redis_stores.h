/*
 * redis_stores.h -- the Redis store and the module's tests' shared
 * fixture, over the servers of redis_harness.h:
 *
 *  - a store opened through the one store interface (store/store.h:
 *    sluice_backend_open() on a sluice_store_config_t), and each of its
 *    verbs (take, peek, reset, refund, penalize, block, reserve, set,
 *    refund_if) called through
 *    be.ops and waited for on the loop;
 *  - a Redis client (include/sluice_redis.h) that has finished its
 *    handshake, for the tests of the client's own options (flags);
 *  - the calls of a command so far (INFO commandstats), which say which
 *    path a decision took (module or script).
 *
 * sluice_backend_open() is called in rs_store_open() alone: a change of
 * its signature is a change here only.
 *
 * Header-only (static inline) so each test stays one source file.
 */
#ifndef SLUICE_TEST_REDIS_STORES_H
#define SLUICE_TEST_REDIS_STORES_H

#include "redis_harness.h"
#include "store/store.h"

#include <uv.h>

/* A limit of `cap` tokens at `rate` ("1/h", "0.5/s"). */
static inline void rs_limit(sluice_limit_t *l, const char *cap,
			    const char *rate)
{
	CHECK(sluice_limit_parse(l, cap, rate, NULL, 0) == 0);
}

/* The calls of one command so far ("sluice.take", "evalsha"), from INFO
 * commandstats; 0 when it never ran. */
static inline long long rs_calls(redisContext *c, const char *cmd)
{
	redisReply *rep = rh_cmd(c, "INFO commandstats");
	char field[64];
	const char *p;
	long long v = 0;

	snprintf(field, sizeof(field), "cmdstat_%s:calls=", cmd);
	p = strstr(rep->str, field);
	if (p)
		v = atoll(p + strlen(field));
	freeReplyObject(rep);
	return v;
}

/* A client that has finished its handshake, module detection included:
 * healthy, and one take answered after the handshake's COMMAND INFO. */
static inline sluice_redis_t *rs_client(uv_loop_t *loop, int port,
					unsigned flags)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char url[64], err[256];
	sluice_limit_t l;

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	o.url = url;
	o.timeout_ms = 5000;
	o.flags = flags;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	CHECK(rh_wait_healthy(loop, r, 10000));
	rs_limit(&l, "1", "1/s");
	CHECK(rh_take(loop, r, "warm-up", &l, 1, 0).status == 0);
	return r;
}

/* ------------------------------------------------ the store interface */

/* What one call through be.ops delivered: its status and `allowed`, and
 * the item's outputs (take and peek; d.which is the limit the decision is
 * about). */
typedef struct rs_result_s {
	int done, status, allowed;
	sluice_decision_t d;
	/* a reservation: its wait, the store's clock and the states it
	 * left (what a conditional refund expects) */
	uint64_t wait_us;
	int64_t now_us;
	sluice_state_t states[SLUICE_MAX_LIMITS];
} rs_result_t;

static inline void rs_on_done(void *arg, int status, int allowed)
{
	rs_result_t *res = arg;

	CHECK(!res->done); /* once per call */
	res->done = 1;
	res->status = status;
	res->allowed = allowed;
}

static inline void rs_on_reserved(void *arg, int status,
				  const sluice_reservation_t *r)
{
	rs_result_t *res = arg;

	CHECK(!res->done); /* once per call */
	CHECK((status == 0) == (r != NULL));
	res->done = 1;
	res->status = status;
	if (r) {
		res->allowed = r->reserved;
		res->d = r->summary;
		res->wait_us = r->wait_us;
		res->now_us = r->now_us;
		memcpy(res->states, r->states, sizeof(res->states));
	}
}

/* Runs the loop until the call is answered (60 s at most: a loaded
 * machine, never a hung test). */
static inline void rs_wait(uv_loop_t *loop, const rs_result_t *res)
{
	int64_t until = rh_ms() + 60000;

	while (!res->done) {
		CHECK(rh_ms() < until);
		uv_run(loop, UV_RUN_ONCE);
	}
}

/* The verbs of store.h. */
typedef enum {
	RS_TAKE,
	RS_PEEK,
	RS_RESET,
	RS_REFUND,
	RS_PENALIZE,
	RS_BLOCK,
	RS_RESERVE, /* ms: the longest wait */
	RS_SET,	    /* cost: the tokens to leave */
} rs_verb_t;

/* One call of `verb` on one item (key, limits l[0..n), cost; ms for a
 * block) through be->ops, answered: the call returned 0, its callback ran
 * once, and (take, peek) the item's `allowed` is the call's. */
static inline rs_result_t rs_call(sluice_backend_t *be, uv_loop_t *loop,
				  rs_verb_t verb, const char *key,
				  const sluice_limit_t *l, size_t n,
				  uint64_t cost, uint64_t ms)
{
	const sluice_store_ops_t *ops = be->ops;
	sluice_take_item_t it = {0};
	rs_result_t res = {0};
	int64_t now = sluice_now_us();
	int rc = SLUICE_EINVAL;

	it.key = key;
	it.keylen = strlen(key);
	it.limits = l;
	it.nlimits = n;
	it.cost = cost;
	switch (verb) {
	case RS_TAKE:
		rc = ops->take(be->impl, &it, 1, now, rs_on_done, &res);
		break;
	case RS_PEEK:
		rc = ops->peek(be->impl, &it, 1, now, rs_on_done, &res);
		break;
	case RS_RESET:
		rc = ops->reset(be->impl, &it, 1, rs_on_done, &res);
		break;
	case RS_REFUND:
		rc = ops->refund(be->impl, &it, 1, now, rs_on_done, &res);
		break;
	case RS_PENALIZE:
		rc = ops->penalize(be->impl, &it, 1, now, rs_on_done, &res);
		break;
	case RS_BLOCK:
		rc = ops->block(be->impl, &it, 1, ms, now, rs_on_done, &res);
		break;
	case RS_RESERVE:
		rc = ops->reserve(be->impl, &it, ms * 1000, now, rs_on_reserved,
				  &res);
		break;
	case RS_SET:
		rc = ops->set(be->impl, &it, 1, cost, now, rs_on_done, &res);
		break;
	}
	CHECK(rc == 0);
	rs_wait(loop, &res);
	if (verb == RS_TAKE || verb == RS_PEEK) {
		res.d = it.summary;
		if (res.status == 0)
			CHECK(it.allowed == res.allowed);
	}
	return res;
}

/* A conditional refund of cost on key's limits l[0..n), expecting the
 * states expected[0..n) (a reservation's): answered, `allowed` 1 when
 * refunded. */
static inline rs_result_t rs_refund_if(sluice_backend_t *be, uv_loop_t *loop,
				       const char *key, const sluice_limit_t *l,
				       size_t n, uint64_t cost,
				       const sluice_state_t *expected)
{
	sluice_take_item_t it = {0};
	rs_result_t res = {0};

	it.key = key;
	it.keylen = strlen(key);
	it.limits = l;
	it.nlimits = n;
	it.cost = cost;
	CHECK(be->ops->refund_if != NULL);
	CHECK(be->ops->refund_if(be->impl, &it, expected, sluice_now_us(),
				 rs_on_done, &res) == 0);
	rs_wait(loop, &res);
	return res;
}

/* A take that must reach Redis and be answered. */
static inline rs_result_t rs_take(sluice_backend_t *be, uv_loop_t *loop,
				  const char *key, const sluice_limit_t *l,
				  size_t n, uint64_t cost)
{
	rs_result_t res = rs_call(be, loop, RS_TAKE, key, l, n, cost, 0);

	CHECK(res.status == 0);
	return res;
}

/* A store on loop from a `store:` section naming `url` (user, password
 * and all), the other settings their defaults but a generous timeout
 * (a loaded machine); returns once it is healthy and has answered one call
 * after its handshake (module detection in).  The one call of
 * sluice_backend_open() in the tests that use this header. */
static inline void rs_store_open(sluice_backend_t *be, uv_loop_t *loop,
				 const char *url)
{
	sluice_store_config_t cfg;
	sluice_limit_t l;
	char err[256];
	int64_t until = rh_ms() + 10000;

	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = SLUICE_STORE_REDIS;
	cfg.url = (char *)url;
	cfg.timeout_ms = 5000;
	if (sluice_backend_open(be, &cfg, loop, NULL, NULL, err, sizeof(err)) !=
	    0) {
		fprintf(stderr, "rs_store_open(%s): %s\n", url, err);
		CHECK(0);
	}
	CHECK(strcmp(be->ops->name, "redis") == 0);
	while (!sluice_backend_healthy(be) && rh_ms() < until) {
		uv_run(loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
	CHECK(sluice_backend_healthy(be));
	rs_limit(&l, "1", "1/s");
	CHECK(rs_call(be, loop, RS_PEEK, "warm-up", &l, 1, 0, 0).status == 0);
}

/* Closes the store and runs the loop until its handles are closed. */
static inline void rs_store_close(sluice_backend_t *be, uv_loop_t *loop)
{
	sluice_backend_close(be);
	uv_run(loop, UV_RUN_DEFAULT);
}

/*
 * The four stores one table runs on, to answer alike: memory, shared
 * memory, the Redis store's script path (a server without the module)
 * and a server with the module at module_path.  Zero it, set what the
 * servers need (with.env, without.env: a frozen clock), then
 * rs_four_open(); rs_four_close() stops and removes everything.
 */
typedef struct rs_store_s {
	const char *name;
	sluice_backend_t be;
	uv_loop_t *loop; /* NULL: a local store, answers at once */
} rs_store_t;

typedef struct rs_four_s {
	rh_redis_t with, without; /* the module loaded, not */
	rs_store_t stores[4];
	sluice_memstore_t *mem;
	uv_loop_t loops[2];
	char path[64]; /* the shared store's file */
} rs_four_t;

static inline void rs_four_open(rs_four_t *f, const char *module_path,
				const char *tag)
{
	sluice_store_config_t cfg;
	char url[64], err[256];
	int i;

	f->with.module = module_path;
	rh_redis_start(&f->with, 0, 0);
	rh_redis_start(&f->without, 0, 0);
	CHECK(sluice_memstore_open(&f->mem, 1000, err, sizeof(err)) == 0);
	f->stores[0].name = "memory";
	sluice_backend_memory(&f->stores[0].be, f->mem);
	snprintf(f->path, sizeof(f->path), "/dev/shm/sluice-test-%s-%d", tag,
		 (int)getpid());
	unlink(f->path);
	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = SLUICE_STORE_SHARED;
	cfg.shm_path = f->path;
	cfg.max_keys = 1000;
	f->stores[1].name = "shared";
	CHECK(sluice_backend_open(&f->stores[1].be, &cfg, NULL, NULL, NULL, err,
				  sizeof(err)) == 0);
	for (i = 0; i < 2; i++) {
		rh_redis_t *r = i ? &f->with : &f->without;

		uv_loop_init(&f->loops[i]);
		f->stores[2 + i].name = i ? "redis (module)" : "redis (script)";
		f->stores[2 + i].loop = &f->loops[i];
		snprintf(url, sizeof(url), "redis://127.0.0.1:%d", r->port);
		rs_store_open(&f->stores[2 + i].be, &f->loops[i], url);
	}
}

static inline void rs_four_close(rs_four_t *f)
{
	int i;

	for (i = 1; i >= 0; i--) {
		rs_store_close(&f->stores[2 + i].be, &f->loops[i]);
		uv_loop_close(&f->loops[i]);
	}
	sluice_backend_close(&f->stores[1].be);
	unlink(f->path);
	sluice_backend_close(&f->stores[0].be);
	sluice_memstore_free(f->mem);
	rh_redis_stop(&f->with);
	rh_redis_stop(&f->without);
}

#endif /* SLUICE_TEST_REDIS_STORES_H */
