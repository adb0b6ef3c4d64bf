/*
 * test_redis_decisions.c -- the Redis store in the memory store's shape:
 * sluice_redis_take_decisions() gives one decision per limit, the same as
 * sluice_memstore_take() gives for the same sequence (on the module path
 * and on the script path, one limit and several, a limit given twice);
 * sluice_redis_reset_key() and sluice_redis_refund_key() take a key and
 * its limits as sluice_memstore_reset() and _refund() do.
 *
 * The limits refill slowly (per hour, per day), so the few milliseconds
 * between the store's clock and the server's never change a decision's
 * tokens; times are compared to the millisecond the Redis store reports.
 *
 * Needs SLUICE_MODULE_PATH (the built sluice-redis.so), set by CMake.
 */
#include "sluice.h"
#include "sluice_redis.h"

#include "redis_stores.h"

#include <uv.h>

#ifndef SLUICE_MODULE_PATH
#error "SLUICE_MODULE_PATH must name the built sluice-redis.so"
#endif

static void take_d(uv_loop_t *loop, sluice_redis_t *r, const char *key,
		   const sluice_limit_t *l, size_t n, uint64_t cost,
		   sluice_decision_t *d, result_t *res)
{
	memset(res, 0, sizeof(*res));
	CHECK(sluice_redis_take_decisions(r, key, strlen(key), l, n, cost, d,
					  on_result, res) == 0);
	while (!res->done)
		uv_run(loop, UV_RUN_ONCE);
	CHECK(res->status == 0);
}

/* A Redis decision (times in whole ms, rounded up) against the memory
 * store's for the same state, a few ms earlier or later. */
static void same(const sluice_decision_t *redis, const sluice_decision_t *mem,
		 size_t which)
{
	CHECK(redis->allowed == mem->allowed && redis->limit == mem->limit &&
	      redis->remaining == mem->remaining && redis->never == mem->never);
	CHECK(redis->which == which && mem->which == which);
	if (!mem->never)
		CHECK(redis->retry_after_us + 2000000 >= mem->retry_after_us &&
		      redis->retry_after_us <= mem->retry_after_us + 2000000);
	CHECK(redis->reset_after_us + 2000000 >= mem->reset_after_us &&
	      redis->reset_after_us <= mem->reset_after_us + 2000000);
}

static void sequence(uv_loop_t *loop, sluice_redis_t *r, const char *key)
{
	sluice_limit_t l[3];
	sluice_memstore_t *m = NULL;
	sluice_decision_t rd[3], md[3], msum;
	static const uint64_t costs[] = {1, 2, 1, 3, 1, 1};
	result_t res;
	size_t i, j, n;

	CHECK(sluice_memstore_open(&m, 64, NULL, 0) == 0);
	rs_limit(&l[0], "5", "1/h");
	rs_limit(&l[1], "4", "1/day");
	rs_limit(&l[2], "5", "1/h"); /* l[0] again: one bucket */
	for (n = 1; n <= 3; n += 2) {
		char k[64];

		snprintf(k, sizeof(k), "%s-%zu", key, n);
		for (i = 0; i < sizeof(costs) / sizeof(costs[0]); i++) {
			int allowed;

			memset(rd, 0xa5, sizeof(rd));
			take_d(loop, r, k, l, n, costs[i], rd, &res);
			allowed = sluice_memstore_take(
				m, k, strlen(k), l, n, costs[i],
				sluice_now_us(), md, &msum);
			CHECK(allowed == res.allowed);
			CHECK(res.d.limit == msum.limit &&
			      res.d.remaining == msum.remaining &&
			      res.which == msum.which);
			for (j = 0; j < n; j++)
				same(&rd[j], &md[j], j);
		}
	}
	sluice_memstore_free(m);
}

static void test_take_decisions_match_the_memory_store(int with, int without)
{
	sluice_redis_t *mod, *script;
	uv_loop_t loop;

	uv_loop_init(&loop);
	mod = rs_client(&loop, with, 0);
	script = rs_client(&loop, without, 0);
	sequence(&loop, mod, "m");
	sequence(&loop, script, "s");
	sluice_redis_free(mod);
	sluice_redis_free(script);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	printf("sluice_redis_take_decisions gives the memory store's "
	       "per-limit decisions, module and script\n");
}

typedef struct {
	int done, status;
} done_t;

static void on_done(void *arg, int status, int allowed)
{
	done_t *d = arg;

	(void)allowed;
	d->done = 1;
	d->status = status;
}

static void wait_done(uv_loop_t *loop, done_t *d)
{
	while (!d->done)
		uv_run(loop, UV_RUN_ONCE);
	CHECK(d->status == 0);
}

static void test_reset_and_refund_take_a_key_and_its_limits(int port)
{
	sluice_redis_t *r;
	sluice_limit_t l[2];
	uv_loop_t loop;
	result_t res;
	done_t d = {0};

	uv_loop_init(&loop);
	r = rs_client(&loop, port, 0);
	rs_limit(&l[0], "3", "1/day");
	rs_limit(&l[1], "10", "1/day");
	CHECK(rh_take(&loop, r, "rk", l, 2, 3).allowed);
	CHECK(!rh_take(&loop, r, "rk", l, 2, 1).allowed);
	/* Two tokens back to both buckets. */
	CHECK(sluice_redis_refund_key(r, "rk", 2, l, 2, 2, on_done, &d) == 0);
	wait_done(&loop, &d);
	res = rh_take(&loop, r, "rk", l, 2, 2);
	CHECK(res.allowed && res.d.remaining == 0 && res.which == 0);
	/* Full again. */
	memset(&d, 0, sizeof(d));
	CHECK(sluice_redis_reset_key(r, "rk", 2, l, 2, on_done, &d) == 0);
	wait_done(&loop, &d);
	res = rh_take(&loop, r, "rk", l, 2, 1);
	CHECK(res.allowed && res.d.remaining == 2);
	/* Malformed as a take is: refused at once, no callback. */
	CHECK(sluice_redis_reset_key(r, "rk", 2, l, 0, on_done, &d) ==
	      SLUICE_EINVAL);
	CHECK(sluice_redis_refund_key(r, "rk", 2, l, SLUICE_MAX_LIMITS + 1, 1,
				      on_done, &d) == SLUICE_EINVAL);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	printf("reset and refund take a key and its limits, as the local "
	       "stores do\n");
}

int main(void)
{
	rh_redis_t with = {0}, without = {0};

	signal(SIGPIPE, SIG_IGN);
	with.module = SLUICE_MODULE_PATH;
	rh_redis_start(&with, 0, 0);
	rh_redis_start(&without, 0, 0);
	test_take_decisions_match_the_memory_store(with.port, without.port);
	test_reset_and_refund_take_a_key_and_its_limits(with.port);
	test_reset_and_refund_take_a_key_and_its_limits(without.port);
	rh_redis_stop(&with);
	rh_redis_stop(&without);
	return 0;
}
