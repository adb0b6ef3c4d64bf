/*
 * test_redis_store_module.c -- the Redis store and the module together:
 * the store finds SLUICE.TAKE on a server that has the module and sends
 * every decision to it (no script call); on a server without the module it
 * uses the script; and store clients on either path serve the same keys
 * without losing or inventing a token.
 *
 * Needs SLUICE_MODULE_PATH (the built sluice-redis.so), set by CMake.
 */
#include "sluice.h"
#include "sluice_redis.h"

#include "redis_harness.h"

#include <uv.h>

#ifndef SLUICE_MODULE_PATH
#error "SLUICE_MODULE_PATH must name the built sluice-redis.so"
#endif

static void limit(sluice_limit_t *l, const char *cap, const char *rate)
{
	CHECK(sluice_limit_parse(l, cap, rate, NULL, 0) == 0);
}

/* A client that has finished its handshake (module detection included). */
static sluice_redis_t *client(uv_loop_t *loop, int port, unsigned flags)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char url[64], err[256];
	int64_t until = rh_ms() + 5000;

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	o.url = url;
	o.timeout_ms = 2000;
	o.flags = flags;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	while (!sluice_redis_healthy(r) && rh_ms() < until)
		uv_run(loop, UV_RUN_NOWAIT);
	/* Let the COMMAND INFO answer of the handshake arrive. */
	until = rh_ms() + 200;
	while (rh_ms() < until)
		uv_run(loop, UV_RUN_NOWAIT);
	return r;
}

/* A decision that must reach Redis. */
static result_t take(uv_loop_t *loop, sluice_redis_t *r, const char *key,
		     const sluice_limit_t *l, size_t n, uint64_t cost)
{
	result_t res = rh_take(loop, r, key, l, n, cost);

	CHECK(res.status == 0);
	return res;
}

/* The calls of one command so far ("sluice.take", "evalsha"), from INFO
 * commandstats; 0 when it never ran. */
static long long calls(redisContext *c, const char *cmd)
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

/* --------------------------------------------------------------- tests */

static void test_store_uses_the_module_when_loaded(int port)
{
	redisContext *c = rh_connect(port);
	sluice_limit_t l[2];
	sluice_redis_t *r;
	uv_loop_t loop;
	result_t res;
	int i;

	uv_loop_init(&loop);
	r = client(&loop, port, 0);
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	limit(&l[0], "5", "1/h");
	for (i = 0; i < 5; i++) {
		res = take(&loop, r, "alice", l, 1, 1);
		CHECK(res.allowed && res.d.remaining == (uint64_t)(4 - i));
	}
	res = take(&loop, r, "alice", l, 1, 1);
	CHECK(!res.allowed && res.d.retry_after_us > 3590000000ull &&
	      res.d.retry_after_us <= 3600000000ull);
	/* The module reports milliseconds; the store passes them on. */
	CHECK(res.d.retry_after_us % 1000 == 0);
	res = take(&loop, r, "alice", l, 1, 6);
	CHECK(!res.allowed && res.d.never &&
	      res.d.retry_after_us == UINT64_MAX);
	/* Several limits: SLUICE.TAKEMULTI, all-or-nothing. */
	limit(&l[0], "10", "1/s");
	limit(&l[1], "2", "2/day");
	CHECK(take(&loop, r, "bob", l, 2, 1).allowed);
	CHECK(take(&loop, r, "bob", l, 2, 1).allowed);
	res = take(&loop, r, "bob", l, 2, 1);
	CHECK(!res.allowed && res.which == 1 && res.d.limit == 2);

	CHECK(calls(c, "sluice.take") == 7);
	CHECK(calls(c, "sluice.takemulti") == 3);
	CHECK(calls(c, "evalsha") == 0 && calls(c, "eval") == 0);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	redisFree(c);
	printf("the store sends every decision to the module when it is "
	       "loaded\n");
}

static void test_module_and_script_clients_share_buckets(int port)
{
	redisContext *c = rh_connect(port);
	sluice_redis_t *mod, *script;
	sluice_limit_t l;
	uv_loop_t loop;
	result_t res;
	int i;

	uv_loop_init(&loop);
	mod = client(&loop, port, 0);
	script = client(&loop, port, SLUICE_REDIS_SCRIPT_ONLY);
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	limit(&l, "8", "1/day");
	/* Alternating paths on one key: each take costs exactly one token. */
	for (i = 0; i < 8; i++) {
		res = take(&loop, i % 2 ? script : mod, "carol", &l, 1, 1);
		CHECK(res.allowed && res.d.remaining == (uint64_t)(7 - i));
	}
	CHECK(!take(&loop, mod, "carol", &l, 1, 1).allowed);
	CHECK(!take(&loop, script, "carol", &l, 1, 1).allowed);
	CHECK(calls(c, "sluice.take") == 5);
	CHECK(calls(c, "evalsha") + calls(c, "eval") >= 5);
	/* Both first: the loop runs until every client handle is closed. */
	sluice_redis_free(mod);
	sluice_redis_free(script);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	redisFree(c);
	printf("module and script clients share buckets token for token\n");
}

/*
 * A bucket is named by its limit, not by its position among the key's
 * limits, on both paths: a user drained on tier "free" (one limit) stays
 * drained when one request comes as tier "paid" (another limit first, then
 * free's); a rule that loses or gains a limit keeps the state of the limits
 * it still has; the same limit twice is one bucket, charged once.  The
 * drain goes through one path and the rest through the other.
 */
static void tier_switch(uv_loop_t *loop, sluice_redis_t *one,
			sluice_redis_t *other, const char *user,
			const char *fresh)
{
	sluice_limit_t free_[1], paid[2], grown[2], dup[2];
	result_t res;
	int i;

	limit(&free_[0], "5", "1/h");
	limit(&paid[0], "100", "100/h");
	paid[1] = free_[0];
	for (i = 0; i < 5; i++)
		CHECK(take(loop, one, user, free_, 1, 1).allowed);
	CHECK(!take(loop, one, user, free_, 1, 1).allowed);
	res = take(loop, other, user, paid, 2, 1);
	CHECK(!res.allowed && res.which == 1 && res.d.limit == 5);
	res = take(loop, one, user, free_, 1, 1);
	CHECK(!res.allowed && res.d.remaining == 0);

	/* "paid" loses its second limit, then gains another in front. */
	for (i = 0; i < 3; i++)
		CHECK(take(loop, one, fresh, paid, 2, 1).allowed);
	res = take(loop, other, fresh, paid, 1, 1);
	CHECK(res.allowed && res.d.limit == 100 && res.d.remaining == 96);
	limit(&grown[0], "1000", "1000/day");
	grown[1] = paid[0];
	res = take(loop, one, fresh, grown, 2, 1);
	CHECK(res.allowed && res.which == 1 && res.d.remaining == 95);
	res = take(loop, other, fresh, free_, 1, 0);
	CHECK(res.allowed && res.d.remaining == 2);

	/* The same limit twice: one bucket, charged once per request. */
	dup[0] = free_[0];
	dup[1] = free_[0];
	res = take(loop, other, "dup", dup, 2, 1);
	CHECK(res.allowed && res.d.remaining == 4 && res.which == 0);
	res = take(loop, one, "dup", free_, 1, 0);
	CHECK(res.allowed && res.d.remaining == 4);
}

static void test_switching_tiers_keeps_every_limit_state(int port)
{
	redisContext *c = rh_connect(port);
	sluice_redis_t *mod, *script;
	uv_loop_t loop;

	uv_loop_init(&loop);
	mod = client(&loop, port, 0);
	script = client(&loop, port, SLUICE_REDIS_SCRIPT_ONLY);
	freeReplyObject(rh_cmd(c, "FLUSHALL"));
	tier_switch(&loop, mod, script, "tier-a", "reload-a");
	freeReplyObject(rh_cmd(c, "FLUSHALL"));
	tier_switch(&loop, script, mod, "tier-b", "reload-b");
	/* The key names every path uses. */
	{
		redisReply *rep = rh_cmd(c, "EXISTS sluice:{dup}:5@1/h");

		CHECK(rep->integer == 1);
		freeReplyObject(rep);
	}
	sluice_redis_free(mod);
	sluice_redis_free(script);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	redisFree(c);
	printf("switching tiers or limits keeps every limit's state, on both "
	       "paths\n");
}

static void test_store_uses_the_script_without_the_module(int port)
{
	redisContext *c = rh_connect(port);
	sluice_redis_t *r;
	sluice_limit_t l;
	uv_loop_t loop;
	int i;

	uv_loop_init(&loop);
	r = client(&loop, port, 0);
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	limit(&l, "3", "1/h");
	for (i = 0; i < 3; i++)
		CHECK(take(&loop, r, "dave", &l, 1, 1).allowed);
	CHECK(!take(&loop, r, "dave", &l, 1, 1).allowed);
	CHECK(calls(c, "evalsha") + calls(c, "eval") >= 4);
	CHECK(calls(c, "sluice.take") == 0);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	redisFree(c);
	printf("without the module the store uses the script\n");
}

int main(void)
{
	rh_redis_t with = {0}, without = {0};

	signal(SIGPIPE, SIG_IGN);
	with.module = SLUICE_MODULE_PATH;
	rh_redis_start(&with, 0, 0);
	rh_redis_start(&without, 0, 0);
	test_store_uses_the_module_when_loaded(with.port);
	test_module_and_script_clients_share_buckets(with.port);
	test_switching_tiers_keeps_every_limit_state(with.port);
	test_store_uses_the_script_without_the_module(without.port);
	rh_redis_stop(&with);
	rh_redis_stop(&without);
	return 0;
}
