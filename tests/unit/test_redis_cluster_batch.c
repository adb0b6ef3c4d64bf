/*
 * test_redis_cluster_batch.c -- the store's batches on a three-master
 * Redis Cluster whose nodes load the module: the takes of one loop turn
 * are gathered per connection and slot (one SLUICE.TAKEEACH serves one
 * slot), so every take reaches the master of its key and is decided
 * exactly once: each user gets exactly its capacity, whatever the mix of
 * slots in the turn, and no call fails with CROSSSLOT.
 *
 * Needs SLUICE_MODULE_PATH (the built sluice-redis.so), set by CMake.
 */
#include "redis_stores.h"
#include "sluice_redis.h"

#ifndef SLUICE_MODULE_PATH
#error "SLUICE_MODULE_PATH must name the built sluice-redis.so"
#endif

#define NODES 3
#define USERS 100
#define TIMES 3

static rh_redis_t servers[NODES];
static char seeds_buf[NODES][32];

static void cluster_start(void)
{
	static const char *const module[] = {"--loadmodule", SLUICE_MODULE_PATH,
					     NULL};

	rh_cluster_create(servers, NODES, module, seeds_buf);
}

/* The calls of cmd so far on the node at port. */
static long long calls(int port, const char *cmd)
{
	redisContext *c = rh_connect(port);
	long long v = rs_calls(c, cmd);

	redisFree(c);
	return v;
}

typedef struct {
	int done, allowed, failed;
} tally_t;

static void on_tally(void *arg, int status, int allowed,
		     const sluice_decision_t *d, size_t which)
{
	tally_t *t = arg;

	(void)d;
	(void)which;
	t->done++;
	if (status)
		t->failed++;
	else if (allowed)
		t->allowed++;
}

/* One turn: every user's takes back to back (runs of one slot), then the
 * same again interleaved (the slot changes at every take). */
static void test_batches_follow_the_slots(void)
{
	const char *seeds[1] = {seeds_buf[0]};
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	sluice_limit_t l;
	uv_loop_t loop;
	tally_t t = {0};
	char err[256], key[32];
	long long each = 0, take = 0;
	int64_t until;
	int i, j, round;

	uv_loop_init(&loop);
	o.seeds = seeds;
	o.nseeds = 1;
	o.timeout_ms = 5000;
	o.connections = 2;
	CHECK(sluice_redis_open(&r, &loop, &o, err, sizeof(err)) == 0);
	CHECK(rh_wait_healthy(&loop, r, 15000));
	/* The handshakes' COMMAND INFO: a round trip to every master. */
	CHECK(sluice_limit_parse(&l, "2", "1/day", NULL, 0) == 0);
	for (i = 0; i < 30; i++) {
		result_t res;

		snprintf(key, sizeof(key), "warm%d", i);
		res = rh_take(&loop, r, key, &l, 1, 0);
		CHECK(res.status == 0);
	}
	for (i = 0; i < NODES; i++) {
		redisContext *c = rh_connect(servers[i].port);

		freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
		redisFree(c);
	}
	for (round = 0; round < 2; round++) {
		for (i = 0; i < USERS * TIMES; i++) {
			/* round 0: u0 u0 u0 u1 ...; round 1: u0 u1 ... u0 */
			j = round ? i % USERS : i / TIMES;
			snprintf(key, sizeof(key), "r%d-user%d", round, j);
			CHECK(sluice_redis_take(r, key, strlen(key), &l, 1, 1,
						on_tally, &t) == 0);
		}
		until = rh_ms() + 30000;
		while (t.done < (round + 1) * USERS * TIMES) {
			uv_run(&loop, UV_RUN_ONCE);
			CHECK(rh_ms() < until);
		}
	}
	CHECK(t.failed == 0);
	CHECK(t.allowed == 2 * USERS * 2);
	for (i = 0; i < NODES; i++) {
		each += calls(servers[i].port, "sluice.takeeach");
		take += calls(servers[i].port, "sluice.take");
	}
	/* Runs of one slot went together; nothing was decided twice. */
	CHECK(each > 0 && take < 2 * USERS * TIMES);
	sluice_redis_free(r);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	printf("cluster: one turn's takes batched per slot (%lld "
	       "SLUICE.TAKEEACH, %lld SLUICE.TAKE), each user exactly its "
	       "capacity\n",
	       each, take);
}

int main(void)
{
	int i;

	signal(SIGPIPE, SIG_IGN);
	cluster_start();
	test_batches_follow_the_slots();
	for (i = 0; i < NODES; i++)
		rh_redis_stop(&servers[i]);
	return 0;
}
