/*
 * test_redis_link_flush.c -- when the Redis client writes what it queued.
 *
 * A take asked while the loop handles I/O (here from the answer to an
 * earlier take, read in the poll phase) is written before the loop's
 * check callbacks run, even one started after it was asked -- such as
 * the Node addon's, which delivers the answers read in that poll phase
 * and so runs the app's responses: Redis works on the new take
 * meanwhile, instead of after them.  A take asked from a timer still
 * leaves before the loop waits for I/O.  And of many takes asked one
 * after another in one poll phase, slowly (a burst of requests an app
 * reads in one go), the first ones leave while the rest are being asked.
 *
 * The server is a fake one (redis_harness.h) that counts the commands it
 * has read: while a check callback holds the loop, what reaches it was
 * written before that callback.
 */
#include "sluice.h"
#include "sluice_redis.h"

#include "redis_harness.h"

#include <uv.h>

static rh_fake_t fake;

/* Every take is allowed (a shortfall of 0: a full bucket); the rest of
 * the handshake gets +OK. */
static const char *answer(const redisReply *cmd, size_t *len)
{
	const char *name = rh_cmd_name(cmd);

	if (strcasecmp(name, "EVALSHA") == 0 || strcasecmp(name, "EVAL") == 0) {
		*len = 4;
		return ":0\r\n";
	}
	*len = 5;
	return "+OK\r\n";
}

typedef struct ctx_s {
	sluice_redis_t *r;
	sluice_limit_t l;
	uv_check_t check;
	int before;  /* commands the server had read when the take was asked */
	int written; /* the take had reached the server in the check */
	int checked; /* the check callback ran */
	result_t next; /* the take asked from the answer */
} ctx_t;

/* Started after the take was asked, so libuv runs it before any check
 * handle started earlier; the client's flush must come first all the
 * same. */
static void on_check(uv_check_t *h)
{
	ctx_t *c = h->data;
	int64_t until = rh_ms() + 10000;

	uv_check_stop(h);
	while (fake.commands <= c->before && rh_ms() < until)
		rh_sleep_ms(1);
	c->written = fake.commands > c->before;
	c->checked = 1;
}

static void on_first(void *arg, int status, int allowed,
		     const sluice_decision_t *d, size_t which)
{
	ctx_t *c = arg;

	(void)d;
	(void)which;
	CHECK(status == 0 && allowed);
	c->before = fake.commands;
	CHECK(sluice_redis_take(c->r, "next", 4, &c->l, 1, 1, on_result,
				&c->next) == 0);
	uv_check_start(&c->check, on_check);
}

static sluice_redis_t *client(uv_loop_t *loop)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char url[64], err[256];

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", fake.port);
	o.url = url;
	o.timeout_ms = 60000; /* a take that waits for it fails the test */
	o.flags = SLUICE_REDIS_SCRIPT_ONLY;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	CHECK(rh_wait_healthy(loop, r, 10000));
	return r;
}

static void test_take_asked_in_poll_phase_is_written_before_check_phase(void)
{
	uv_loop_t loop;
	ctx_t c = {0};
	int64_t until = rh_ms() + 60000;

	uv_loop_init(&loop);
	c.r = client(&loop);
	rh_limit(&c.l, 10, "1/s");
	uv_check_init(&loop, &c.check);
	c.check.data = &c;
	CHECK(sluice_redis_take(c.r, "first", 5, &c.l, 1, 1, on_first, &c) ==
	      0);
	while (!c.checked && rh_ms() < until)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(c.checked);
	if (!c.written)
		fprintf(stderr, "the take asked in the poll phase was not "
				"written before the check phase\n");
	CHECK(c.written);
	while (!c.next.done && rh_ms() < until)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(c.next.done && c.next.status == 0 && c.next.allowed);
	uv_close((uv_handle_t *)&c.check, NULL);
	rh_close_client(&loop, c.r);
	CHECK(uv_loop_close(&loop) == 0);
}

static void on_timer(uv_timer_t *t)
{
	ctx_t *c = t->data;

	c->before = fake.commands;
	CHECK(sluice_redis_take(c->r, "timer", 5, &c->l, 1, 1, on_result,
				&c->next) == 0);
}

static void test_take_asked_from_a_timer_is_answered(void)
{
	uv_loop_t loop;
	uv_timer_t t;
	ctx_t c = {0};
	int64_t until = rh_ms() + 60000;

	uv_loop_init(&loop);
	c.r = client(&loop);
	rh_limit(&c.l, 10, "1/s");
	uv_timer_init(&loop, &t);
	t.data = &c;
	uv_timer_start(&t, on_timer, 1, 0);
	while (!c.next.done && rh_ms() < until)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(c.next.done && c.next.status == 0 && c.next.allowed);
	CHECK(fake.commands > c.before);
	uv_close((uv_handle_t *)&t, NULL);
	rh_close_client(&loop, c.r);
	CHECK(uv_loop_close(&loop) == 0);
}

/* Takes asked one by one from the poll phase, each after a while (a
 * burst of requests read in one turn, each costing the app some work):
 * the first ones leave while the rest are still being asked -- before
 * the turn ends -- so that Redis works on them meanwhile instead of
 * waiting for the whole burst; every take is answered once. */
#define BURST 16

typedef struct burst_s {
	sluice_redis_t *r;
	sluice_limit_t l;
	int before;  /* commands the server had read before the burst */
	int written; /* some of the burst reached it before the turn ended */
	int asked;
	result_t res[BURST];
} burst_t;

static void on_burst(void *arg, int status, int allowed,
		     const sluice_decision_t *d, size_t which)
{
	burst_t *b = arg;
	int64_t until;
	int i;

	(void)d;
	(void)which;
	CHECK(status == 0 && allowed);
	b->before = fake.commands;
	for (i = 0; i < BURST; i++) {
		char key[16];

		snprintf(key, sizeof(key), "burst%d", i);
		rh_sleep_ms(1); /* the app's work on the request */
		CHECK(sluice_redis_take(b->r, key, strlen(key), &b->l, 1, 1,
					on_result, &b->res[i]) == 0);
	}
	b->asked = 1;
	/* Still inside the poll phase: no loop handle can have run. */
	until = rh_ms() + 10000;
	while (fake.commands <= b->before && rh_ms() < until)
		rh_sleep_ms(1);
	b->written = fake.commands > b->before;
}

static void test_burst_leaves_before_the_turn_ends(void)
{
	uv_loop_t loop;
	burst_t b = {0};
	int64_t until = rh_ms() + 60000;
	int i, all = 0;

	uv_loop_init(&loop);
	b.r = client(&loop);
	rh_limit(&b.l, 10, "1/s");
	CHECK(sluice_redis_take(b.r, "first", 5, &b.l, 1, 1, on_burst, &b) ==
	      0);
	while (!b.asked && rh_ms() < until)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(b.asked);
	if (!b.written)
		fprintf(stderr,
			"none of %d takes asked at once was written "
			"before the loop turn ended\n",
			BURST);
	CHECK(b.written);
	while (!all && rh_ms() < until) {
		uv_run(&loop, UV_RUN_ONCE);
		for (all = 1, i = 0; i < BURST; i++)
			all &= b.res[i].done;
	}
	for (i = 0; i < BURST; i++)
		CHECK(b.res[i].done && b.res[i].status == 0 &&
		      b.res[i].allowed);
	rh_close_client(&loop, b.r);
	CHECK(uv_loop_close(&loop) == 0);
}

int main(void)
{
	rh_fake_start(&fake, answer);
	test_take_asked_in_poll_phase_is_written_before_check_phase();
	test_take_asked_from_a_timer_is_answered();
	test_burst_leaves_before_the_turn_ends();
	printf("test_redis_link_flush: ok\n");
	return 0;
}
