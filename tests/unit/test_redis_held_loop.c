/*
 * test_redis_held_loop.c -- a loop held past a deadline (a long callback,
 * a host with more work than cores) does not make the Redis client call
 * the server late when its answer is already there.
 *
 * The loop runs its next turn's timers before it polls the sockets (libuv
 * before 1.45 at the top of every turn; later ones right after a blocked
 * check callback, and in uv_run(UV_RUN_DEFAULT)'s first turn, as Node
 * starts): the deadline timer fires while the answer sits unread in the
 * socket.  The client reads the socket before it expires anything, and
 * the connect/handshake deadline likewise counts from when the
 * connection last moved on.
 *
 * The server is a fake one (redis_harness.h) that answers a take 30 ms
 * after it read it, so that the answer is not read in the turn that
 * wrote the take, and that says when it answered.
 */
#include "sluice.h"
#include "sluice_redis.h"

#include "redis_harness.h"

#include <uv.h>

static rh_fake_t fake;
static volatile int answered; /* takes the fake has answered */

/* Every take is allowed (a shortfall of 0), 30 ms late; the rest of the
 * handshake gets +OK at once. */
static const char *answer(const redisReply *cmd, size_t *len)
{
	const char *name = rh_cmd_name(cmd);

	if (strcasecmp(name, "EVALSHA") == 0 || strcasecmp(name, "EVAL") == 0) {
		rh_sleep_ms(30);
		__sync_fetch_and_add(&answered, 1);
		*len = 4;
		return ":0\r\n";
	}
	*len = 5;
	return "+OK\r\n";
}

static int timeouts; /* SLUICE_REDIS_EV_TIMEOUT events */

static void on_event(void *arg, const sluice_redis_event_t *ev)
{
	(void)arg;
	if (ev->kind == SLUICE_REDIS_EV_TIMEOUT) {
		fprintf(stderr, "timeout event: %s\n", ev->detail);
		timeouts++;
	}
}

static sluice_redis_t *client(uv_loop_t *loop, unsigned timeout_ms)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char url[64], err[256];

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", fake.port);
	o.url = url;
	o.timeout_ms = timeout_ms;
	o.flags = SLUICE_REDIS_SCRIPT_ONLY;
	o.on_event = on_event;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	return r;
}

typedef struct hold_s {
	uv_check_t check;
	int64_t until; /* the deadline passed, with room to spare */
	int held;
} hold_t;

/* Holds the loop, from a check callback, until the take's deadline has
 * passed and the fake's answer has been in the socket for a while. */
static void on_hold(uv_check_t *h)
{
	hold_t *hd = h->data;
	int64_t give_up = rh_ms() + 60000;

	uv_check_stop(h);
	while (!answered && rh_ms() < give_up)
		rh_sleep_ms(1);
	rh_sleep_ms(100); /* the fake writes right after it answered */
	while (rh_ms() < hd->until)
		rh_sleep_ms(5);
	hd->held = 1;
}

static void test_answer_in_socket_when_deadline_passes_answers_the_take(void)
{
	const unsigned timeout = 100;
	uv_loop_t loop;
	sluice_redis_t *r;
	sluice_limit_t l;
	hold_t hd = {0};
	result_t res = {0};
	int turns = 0;

	uv_loop_init(&loop);
	r = client(&loop, timeout);
	CHECK(rh_wait_healthy(&loop, r, 30000));
	rh_limit(&l, 10, "1/s");
	answered = 0;
	timeouts = 0;
	uv_check_init(&loop, &hd.check);
	hd.check.data = &hd;
	CHECK(sluice_redis_take(r, "held", 4, &l, 1, 1, on_result, &res) == 0);
	hd.until = rh_ms() + 3 * timeout;
	uv_check_start(&hd.check, on_hold);
	/* The turn writes the take (end-of-turn hook), polls without
	 * waiting (the answer comes 30 ms later), then holds the loop in
	 * the check phase; the next timers run before the next poll. */
	while (!hd.held)
		uv_run(&loop, UV_RUN_NOWAIT);
	while (!res.done && ++turns < 1000)
		uv_run(&loop, UV_RUN_NOWAIT);
	CHECK(res.done);
	if (res.status != 0)
		fprintf(stderr, "the take answered in the socket failed: %d\n",
			res.status);
	CHECK(res.status == 0 && res.allowed);
	CHECK(timeouts == 0);
	uv_close((uv_handle_t *)&hd.check, NULL);
	rh_close_client(&loop, r);
	CHECK(uv_loop_close(&loop) == 0);
}

/* The loop held 1.3 s right after the client was opened (its connect
 * started, nothing polled): longer than the connect/handshake timeout
 * (1000 ms).  The kernel completed the connect meanwhile; the client
 * connects, does its handshake and answers a take with no timeout. */
static void test_loop_held_after_open_is_no_connect_timeout(void)
{
	uv_loop_t loop;
	sluice_redis_t *r;
	sluice_limit_t l;
	result_t res;

	uv_loop_init(&loop);
	timeouts = 0;
	answered = 0;
	r = client(&loop, 60000);
	rh_sleep_ms(1300);
	CHECK(rh_wait_healthy(&loop, r, 30000));
	rh_limit(&l, 10, "1/s");
	res = rh_take(&loop, r, "after", &l, 1, 1);
	CHECK(res.status == 0 && res.allowed);
	if (timeouts)
		fprintf(stderr, "a held loop was taken for a node timing "
				"out\n");
	CHECK(timeouts == 0);
	rh_close_client(&loop, r);
	CHECK(uv_loop_close(&loop) == 0);
}

/* The same hold in the loop's first turn of uv_run(UV_RUN_DEFAULT), where
 * every libuv runs the timers before it polls (as Node starts after its
 * main script): the take asked before the hold is answered. */
typedef struct first_s {
	uv_loop_t *loop;
	sluice_redis_t *r;
	sluice_limit_t l;
	result_t res;
} first_t;

static void on_first_answer(void *arg, int status, int allowed,
			    const sluice_decision_t *d, size_t which)
{
	first_t *f = arg;

	on_result(&f->res, status, allowed, d, which);
	/* Done: uv_run(UV_RUN_DEFAULT) returns after this turn. */
	uv_stop(f->loop);
}

static void test_loop_held_before_first_turn_is_no_connect_timeout(void)
{
	uv_loop_t loop;
	first_t f = {0};

	uv_loop_init(&loop);
	timeouts = 0;
	answered = 0;
	f.loop = &loop;
	f.r = client(&loop, 60000);
	rh_limit(&f.l, 10, "1/s");
	CHECK(sluice_redis_take(f.r, "first", 5, &f.l, 1, 1, on_first_answer,
				&f) == 0);
	rh_sleep_ms(1300);
	uv_run(&loop, UV_RUN_DEFAULT);
	CHECK(f.res.done);
	if (f.res.status != 0)
		fprintf(stderr, "the first take failed: %d\n", f.res.status);
	CHECK(f.res.status == 0 && f.res.allowed);
	CHECK(timeouts == 0);
	rh_close_client(&loop, f.r);
	CHECK(uv_loop_close(&loop) == 0);
}

/* Runs every test, or those whose names hold argv[1]. */
#define HELD_RUN(t)                                                            \
	do {                                                                   \
		if (argc < 2 || strstr(#t, argv[1]))                           \
			t();                                                   \
	} while (0)

int main(int argc, char **argv)
{
	rh_fake_start(&fake, answer);
	HELD_RUN(test_answer_in_socket_when_deadline_passes_answers_the_take);
	HELD_RUN(test_loop_held_after_open_is_no_connect_timeout);
	HELD_RUN(test_loop_held_before_first_turn_is_no_connect_timeout);
	printf("test_redis_held_loop: ok\n");
	return 0;
}
