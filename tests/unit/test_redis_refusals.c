/*
 * test_redis_refusals.c -- a Redis that answers and refuses every decision
 * (EVALSHA renamed away, an ACL user without key permissions) is said
 * plainly: the server's own words in one event (not one per call) and in
 * the node's last error, the error kind in the report (refused, noperm),
 * and the node unhealthy while it refuses, healthy again on its own (no
 * traffic needed) once it accepts.
 */
#include "redis_harness.h"
#include "sluice_redis.h"
#include "store/redis/redis_int.h"

static int refused_events;
static char refused_detail[256];
static int kinds[SLUICE_REDIS_ERRORS];

static void on_event(void *arg, const sluice_redis_event_t *ev)
{
	(void)arg;
	if (ev->kind == SLUICE_REDIS_EV_REFUSED) {
		refused_events++;
		snprintf(refused_detail, sizeof(refused_detail), "%s",
			 ev->detail);
	}
}

static void on_report(void *arg, const sluice_redis_node_report_t *rep)
{
	(void)arg;
	if (rep->error > SLUICE_REDIS_ERR_NONE &&
	    rep->error < SLUICE_REDIS_ERRORS)
		kinds[rep->error]++;
}

static sluice_redis_t *client(uv_loop_t *loop, const char *url)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char err[256];

	o.url = url;
	o.timeout_ms = 2000;
	o.flags = SLUICE_REDIS_SCRIPT_ONLY;
	o.on_event = on_event;
	o.on_report = on_report;
	memset(kinds, 0, sizeof(kinds));
	refused_events = 0;
	refused_detail[0] = '\0';
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	CHECK(rh_wait_healthy(loop, r, 10000));
	return r;
}

/* Ten decisions, each refused by the server; the breaker opens after
 * five, so those that follow fail fast: all fail. */
static void refuse_ten(uv_loop_t *loop, sluice_redis_t *r)
{
	sluice_limit_t l;
	int i;

	rh_limit(&l, 10, "1/s");
	for (i = 0; i < 10; i++) {
		result_t res = rh_take(loop, r, "alice", &l, 1, 1);

		CHECK(res.status == SLUICE_ESTORE);
		rh_run_for(loop, 30);
	}
}

static void test_renamed_evalsha_is_said_once_with_the_servers_words(void)
{
	static const char *const extra[] = {"--rename-command", "EVALSHA", "",
					    NULL};
	rh_redis_t s = {0};
	sluice_redis_t *r;
	uv_loop_t loop;
	char url[64];

	s.extra = extra;
	rh_redis_start(&s, 0, 0);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", s.port);
	uv_loop_init(&loop);
	r = client(&loop, url);
	refuse_ten(&loop, r);
	fprintf(stderr, "refused: \"%s\", %d event(s); last error \"%s\"\n",
		refused_detail, refused_events, r->nodes[0]->last_error);
	CHECK(refused_events == 1);
	CHECK(strstr(refused_detail, "unknown command") != NULL);
	CHECK(strstr(refused_detail, "EVALSHA") != NULL);
	CHECK(strstr(r->nodes[0]->last_error, "unknown command") != NULL);
	CHECK(kinds[SLUICE_REDIS_ERR_REFUSED] >= 5);
	CHECK(kinds[SLUICE_REDIS_ERR_PROTOCOL] == 0);
	/* Connected, answering, refusing: not a store that decides. */
	CHECK(!sluice_redis_healthy(r));
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	rh_redis_stop(&s);
}

static void test_acl_without_key_permission_is_noperm_until_fixed(void)
{
	rh_redis_t s = {0};
	redisContext *c;
	sluice_redis_t *r;
	uv_loop_t loop;
	char url[96];
	int64_t until;

	rh_redis_start(&s, 0, 0);
	c = rh_connect(s.port);
	/* Every command, no key of sluice's. */
	freeReplyObject(rh_cmd(c, "ACL SETUSER appuser on >pw-9x ~other:* "
				  "+@all"));
	snprintf(url, sizeof(url), "redis://appuser:pw-9x@127.0.0.1:%d",
		 s.port);
	uv_loop_init(&loop);
	r = client(&loop, url);
	refuse_ten(&loop, r);
	fprintf(stderr, "noperm: \"%s\"\n", refused_detail);
	CHECK(refused_events == 1);
	CHECK(strncmp(refused_detail, "NOPERM", 6) == 0);
	CHECK(strstr(r->nodes[0]->last_error, "NOPERM") != NULL);
	CHECK(kinds[SLUICE_REDIS_ERR_NOPERM] >= 5);
	CHECK(!sluice_redis_healthy(r));
	/* The ACL fixed: healthy again with no decision asked. */
	freeReplyObject(rh_cmd(c, "ACL SETUSER appuser ~*"));
	until = rh_ms() + 10000;
	while (!sluice_redis_healthy(r) && rh_ms() < until) {
		uv_run(&loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
	CHECK(sluice_redis_healthy(r));
	{
		sluice_limit_t l;
		result_t res;

		rh_limit(&l, 10, "1/s");
		res = rh_take(&loop, r, "alice", &l, 1, 1);
		CHECK(res.status == 0 && res.allowed);
	}
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	redisFree(c);
	rh_redis_stop(&s);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(test_renamed_evalsha_is_said_once_with_the_servers_words);
	RUN(test_acl_without_key_permission_is_noperm_until_fixed);
	TESTS_DONE();
}
