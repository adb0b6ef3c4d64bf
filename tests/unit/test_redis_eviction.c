/*
 * test_redis_eviction.c -- a Redis that may evict buckets is said so: with
 * maxmemory set, every policy but noeviction can (sluice's keys all have
 * a TTL, so volatile-* ones too); the verdict is told once per change, at
 * connect and again after a reconnect, and reported for the metrics.
 * CONFIG renamed away: INFO memory says it; both refused: "unknown", once.
 * No maxmemory (the default): nothing is told.
 */
#include "redis_harness.h"
#include "sluice_redis.h"
#include "store/redis/redis_int.h"

static int events;
static char detail[512];
static int reported = -2; /* eviction_unsafe in the last gauge report */

static void on_event(void *arg, const sluice_redis_event_t *ev)
{
	(void)arg;
	if (ev->kind == SLUICE_REDIS_EV_EVICTION) {
		events++;
		snprintf(detail, sizeof(detail), "%s", ev->detail);
		fprintf(stderr, "eviction_policy: %s\n", ev->detail);
	}
}

static void on_report(void *arg, const sluice_redis_node_report_t *rep)
{
	(void)arg;
	if (rep->what == SLUICE_REDIS_REPORT_GAUGES)
		reported = rep->eviction_unsafe;
}

static sluice_redis_t *client(uv_loop_t *loop, int port)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char url[64], err[256];

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	o.url = url;
	o.timeout_ms = 2000;
	o.connections = 2;
	o.on_event = on_event;
	o.on_report = on_report;
	events = 0;
	detail[0] = '\0';
	reported = -2;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	CHECK(rh_wait_healthy(loop, r, 10000));
	return r;
}

/* Runs the loop until `n` events and a gauge report of `unsafe` were
 * seen (10 s at most). */
static void wait_for(uv_loop_t *loop, int n, int unsafe)
{
	int64_t until = rh_ms() + 10000;

	while ((events < n || reported != unsafe) && rh_ms() < until) {
		uv_run(loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
	CHECK(events == n);
	CHECK(reported == unsafe);
}

static void start(rh_redis_t *s, const char *const *extra)
{
	memset(s, 0, sizeof(*s));
	s->extra = extra;
	rh_redis_start(s, 0, 0);
}

static void test_allkeys_and_volatile_policies_may_evict(void)
{
	static const char *const extra[] = {"--maxmemory", "64mb",
					    "--maxmemory-policy", "allkeys-lru",
					    NULL};
	rh_redis_t s;
	redisContext *c;
	sluice_redis_t *r;
	uv_loop_t loop;

	start(&s, extra);
	c = rh_connect(s.port);
	uv_loop_init(&loop);
	r = client(&loop, s.port);
	/* Two connections asked; one event for the node. */
	wait_for(&loop, 1, 1);
	CHECK(strstr(detail, "allkeys-lru") && strstr(detail, "may evict"));
	rh_run_for(&loop, 300);
	CHECK(events == 1);

	/* volatile-ttl evicts sluice's keys too (they all have a TTL):
	 * seen after a reconnect. */
	freeReplyObject(rh_cmd(c, "CONFIG SET maxmemory-policy volatile-ttl"));
	freeReplyObject(rh_cmd(c, "CLIENT KILL TYPE normal"));
	wait_for(&loop, 2, 1);
	CHECK(strstr(detail, "volatile-ttl") && strstr(detail, "may evict"));

	/* noeviction: safe, and said so (a change). */
	freeReplyObject(rh_cmd(c, "CONFIG SET maxmemory-policy noeviction"));
	freeReplyObject(rh_cmd(c, "CLIENT KILL TYPE normal"));
	wait_for(&loop, 3, 0);
	CHECK(strstr(detail, "never evicted"));
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	redisFree(c);
	rh_redis_stop(&s);
}

static void test_no_maxmemory_is_silent_and_safe(void)
{
	static const char *const extra[] = {"--maxmemory-policy", "allkeys-lru",
					    NULL};
	rh_redis_t s;
	sluice_redis_t *r;
	uv_loop_t loop;

	start(&s, extra); /* maxmemory 0: no limit, nothing evicted */
	uv_loop_init(&loop);
	r = client(&loop, s.port);
	wait_for(&loop, 0, 0);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	rh_redis_stop(&s);
}

static void test_config_renamed_info_says_it(void)
{
	static const char *const extra[] = {
		"--rename-command",   "CONFIG",	     "",  "--maxmemory", "64mb",
		"--maxmemory-policy", "allkeys-lfu", NULL};
	rh_redis_t s;
	sluice_redis_t *r;
	uv_loop_t loop;

	start(&s, extra);
	uv_loop_init(&loop);
	r = client(&loop, s.port);
	wait_for(&loop, 1, 1);
	CHECK(strstr(detail, "allkeys-lfu"));
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	rh_redis_stop(&s);
}

static void test_config_and_info_refused_is_unknown_once(void)
{
	static const char *const extra[] = {"--rename-command",
					    "CONFIG",
					    "",
					    "--rename-command",
					    "INFO",
					    "",
					    NULL};
	rh_redis_t s;
	sluice_redis_t *r;
	uv_loop_t loop;

	start(&s, extra);
	uv_loop_init(&loop);
	r = client(&loop, s.port);
	wait_for(&loop, 1, -1);
	CHECK(strstr(detail, "unknown"));
	rh_run_for(&loop, 300);
	CHECK(events == 1);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	rh_redis_stop(&s);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(test_allkeys_and_volatile_policies_may_evict);
	RUN(test_no_maxmemory_is_silent_and_safe);
	RUN(test_config_renamed_info_says_it);
	RUN(test_config_and_info_refused_is_unknown_once);
	TESTS_DONE();
}
