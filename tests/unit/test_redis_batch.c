/*
 * test_redis_batch.c -- many decisions in one command.
 *
 * The module: SLUICE.TAKEEACH (one limit, many keys) answers, stores and
 * expires exactly what the same SLUICE.TAKEs one after the other would,
 * key by key, at the same instant (the module's test clock).
 *
 * The store: the one-limit takes a loop turn queues for one connection go
 * as one SLUICE.TAKEEACH (one limit and cost) or SLUICE.TAKEMANY (mixed),
 * and every caller still gets its own decision, the same one it gets
 * from a client that sends each take alone (SLUICE_REDIS_NO_BATCH), or
 * its own error; peeks and several limits go alone; takes gathered and
 * not sent when the client is freed fail, each once.
 *
 * Needs SLUICE_MODULE_PATH (the built sluice-redis.so), set by CMake.
 */
#include "sluice.h"
#include "sluice_redis.h"

#include "redis_stores.h"

#include <time.h>
#include <uv.h>

#ifndef SLUICE_MODULE_PATH
#error "SLUICE_MODULE_PATH must name the built sluice-redis.so"
#endif

/* Fixes the module's clock a minute ahead of the real one (a state's
 * expiry must lie ahead of the server's own clock): decisions are exact. */
static void fix_clock(redisContext *c)
{
	long long us = ((long long)time(NULL) + 60) * 1000000LL;

	freeReplyObject(rh_cmd(c, "SLUICE.TESTCLOCK %lld", us));
}

#define MAXCALLS 64

/* One take of a batch: its inputs, and what its own callback got. */
typedef struct {
	char key[32];
	const sluice_limit_t *limit;
	uint64_t cost;
	int peek;
	result_t res;
} take_t;

/* Starts every take within one loop turn (nothing runs in between), then
 * runs the loop until each has its answer. */
static void run_turn(uv_loop_t *loop, sluice_redis_t *r, take_t *t, size_t n)
{
	size_t i, done;
	int64_t until = rh_ms() + 20000;

	for (i = 0; i < n; i++) {
		memset(&t[i].res, 0, sizeof(t[i].res));
		CHECK((t[i].peek ? sluice_redis_peek : sluice_redis_take)(
			      r, t[i].key, strlen(t[i].key), t[i].limit, 1,
			      t[i].cost, on_result, &t[i].res) == 0);
	}
	do {
		uv_run(loop, UV_RUN_ONCE);
		for (i = done = 0; i < n; i++)
			done += (size_t)t[i].res.done;
		CHECK(rh_ms() < until);
	} while (done < n);
}

static void same_decision(const result_t *a, const result_t *b)
{
	CHECK(a->status == 0 && b->status == 0);
	CHECK(a->allowed == b->allowed);
	CHECK(a->d.allowed == b->d.allowed && a->d.limit == b->d.limit &&
	      a->d.remaining == b->d.remaining &&
	      a->d.retry_after_us == b->d.retry_after_us &&
	      a->d.reset_after_us == b->d.reset_after_us &&
	      a->d.never == b->d.never && a->which == b->which);
}

/* --------------------------------------------------------------- module */

/* The reply of one command as text, nested arrays in brackets. */
static void reply_text(const redisReply *r, char *out, size_t cap)
{
	size_t len = strlen(out), i;

	if (r->type == REDIS_REPLY_ARRAY) {
		snprintf(out + len, cap - len, "[");
		for (i = 0; i < r->elements; i++)
			reply_text(r->element[i], out, cap);
		len = strlen(out);
		snprintf(out + len, cap - len, "]");
	} else if (r->type == REDIS_REPLY_INTEGER) {
		snprintf(out + len, cap - len, "%lld ", r->integer);
	} else if (r->type == REDIS_REPLY_ERROR) {
		snprintf(out + len, cap - len, "E(%s) ", r->str);
	} else {
		snprintf(out + len, cap - len, "?%d ", r->type);
	}
}

/* SLUICE.TAKEEACH over keys "e:<name>" equals SLUICE.TAKE over "t:<name>"
 * one after the other: the replies, the stored values and their expiry
 * to the millisecond. */
static void test_takeeach_is_takes_one_after_the_other(int port)
{
	static const char *const names[] = {"a", "b",	"a", "c",
					    "a", "lst", "b", "d"};
	const size_t n = sizeof(names) / sizeof(names[0]);
	redisContext *c = rh_connect(port);
	char each[4096] = "", one[4096] = "", key[32];
	const char *argv[4 + 8];
	redisReply *rep;
	size_t i, lens[4 + 8];
	char ekeys[8][32];

	freeReplyObject(rh_cmd(c, "FLUSHALL"));
	fix_clock(c);
	freeReplyObject(rh_cmd(c, "RPUSH e:lst x"));
	freeReplyObject(rh_cmd(c, "RPUSH t:lst x"));
	argv[0] = "SLUICE.TAKEEACH";
	argv[1] = "3";
	argv[2] = "1/s";
	argv[3] = "2";
	for (i = 0; i < n; i++) {
		snprintf(ekeys[i], sizeof(ekeys[i]), "e:%s", names[i]);
		argv[4 + i] = ekeys[i];
	}
	for (i = 0; i < 4 + n; i++)
		lens[i] = strlen(argv[i]);
	rep = redisCommandArgv(c, (int)(4 + n), argv, lens);
	CHECK(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == n);
	reply_text(rep, each, sizeof(each));
	freeReplyObject(rep);
	strcat(one, "[");
	for (i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "t:%s", names[i]);
		rep = redisCommand(c, "SLUICE.TAKE %s 3 1/s COST 2", key);
		CHECK(rep != NULL);
		reply_text(rep, one, sizeof(one));
		freeReplyObject(rep);
	}
	strcat(one, "]");
	if (strcmp(each, one) != 0) {
		fprintf(stderr, "TAKEEACH %s\nTAKEs    %s\n", each, one);
		CHECK(0);
	}
	/* The same bytes stored, with the same expiry. */
	for (i = 0; i < n; i++) {
		redisReply *a, *b;

		if (strcmp(names[i], "lst") == 0)
			continue;
		a = rh_cmd(c, "GET e:%s", names[i]);
		b = rh_cmd(c, "GET t:%s", names[i]);
		CHECK(a->type == REDIS_REPLY_STRING &&
		      b->type == REDIS_REPLY_STRING && a->len == b->len &&
		      memcmp(a->str, b->str, a->len) == 0);
		freeReplyObject(a);
		freeReplyObject(b);
		a = rh_cmd(c, "PEXPIRETIME e:%s", names[i]);
		b = rh_cmd(c, "PEXPIRETIME t:%s", names[i]);
		CHECK(a->integer > 0 && a->integer == b->integer);
		freeReplyObject(a);
		freeReplyObject(b);
		a = rh_cmd(c, "OBJECT ENCODING e:%s", names[i]);
		b = rh_cmd(c, "OBJECT ENCODING t:%s", names[i]);
		CHECK(strcmp(a->str, b->str) == 0);
		freeReplyObject(a);
		freeReplyObject(b);
	}
	/* Cluster routing finds every key. */
	rep = rh_cmd(c, "COMMAND GETKEYS SLUICE.TAKEEACH 3 1/s 1 k1 k2");
	CHECK(rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	      strcmp(rep->element[0]->str, "k1") == 0 &&
	      strcmp(rep->element[1]->str, "k2") == 0);
	freeReplyObject(rep);
	/* Bad arguments fail the whole call, deciding nothing. */
	rep = redisCommand(c, "SLUICE.TAKEEACH 3 1/s 1");
	CHECK(rep != NULL);
	CHECK(rep->type == REDIS_REPLY_ERROR &&
	      strstr(rep->str, "wrong number of arguments"));
	freeReplyObject(rep);
	rep = redisCommand(c, "SLUICE.TAKEEACH 3 1/s x f:1");
	CHECK(rep != NULL);
	CHECK(rep->type == REDIS_REPLY_ERROR && strstr(rep->str, "cost"));
	freeReplyObject(rep);
	rep = redisCommand(c, "SLUICE.TAKEEACH 3 1/q 1 f:1");
	CHECK(rep != NULL);
	CHECK(rep->type == REDIS_REPLY_ERROR);
	freeReplyObject(rep);
	rep = rh_cmd(c, "EXISTS f:1");
	CHECK(rep->integer == 0);
	freeReplyObject(rep);
	freeReplyObject(rh_cmd(c, "SLUICE.TESTCLOCK 0"));
	redisFree(c);
	printf("SLUICE.TAKEEACH decides, stores and expires as TAKEs one "
	       "after the other\n");
}

/* ---------------------------------------------------------------- store */

/* 30 takes of one limit and cost in one turn: one SLUICE.TAKEEACH, and
 * each caller's decision is the one a client sending every take alone
 * gets for the same sequence. */
static void test_one_turn_of_one_limit_is_one_command(int port)
{
	redisContext *c = rh_connect(port);
	sluice_redis_t *batched, *alone;
	take_t a[30], b[30];
	sluice_limit_t l;
	uv_loop_t loop;
	size_t i;

	freeReplyObject(rh_cmd(c, "FLUSHALL"));
	fix_clock(c);
	uv_loop_init(&loop);
	batched = rs_client(&loop, port, 0);
	alone = rs_client(&loop, port, SLUICE_REDIS_NO_BATCH);
	rs_limit(&l, "2", "1/day");
	/* Each of 10 users three times: allowed, allowed, rejected. */
	for (i = 0; i < 30; i++) {
		snprintf(a[i].key, sizeof(a[i].key), "u%zu", i % 10);
		snprintf(b[i].key, sizeof(b[i].key), "v%zu", i % 10);
		a[i].limit = b[i].limit = &l;
		a[i].cost = b[i].cost = 1;
		a[i].peek = b[i].peek = 0;
	}
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	run_turn(&loop, batched, a, 30);
	CHECK(rs_calls(c, "sluice.takeeach") == 1);
	CHECK(rs_calls(c, "sluice.take") == 0 && rs_calls(c, "evalsha") == 0);
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	run_turn(&loop, alone, b, 30);
	CHECK(rs_calls(c, "sluice.take") == 30);
	CHECK(rs_calls(c, "sluice.takeeach") == 0 &&
	      rs_calls(c, "sluice.takemany") == 0);
	for (i = 0; i < 30; i++) {
		same_decision(&a[i].res, &b[i].res);
		CHECK(a[i].res.allowed == (i < 20));
		CHECK(a[i].res.d.remaining == (i < 10 ? 1u : 0u));
	}
	sluice_redis_free(batched);
	sluice_redis_free(alone);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	freeReplyObject(rh_cmd(c, "SLUICE.TESTCLOCK 0"));
	redisFree(c);
	printf("one turn's takes of one limit go as one SLUICE.TAKEEACH, "
	       "each caller answered as if alone\n");
}

/* Mixed limits and costs go as one SLUICE.TAKEMANY; a peek and a take of
 * two limits go alone; a key that holds a list fails its own caller only. */
static void test_mixed_turn_is_one_takemany_and_errors_stay_apart(int port)
{
	redisContext *c = rh_connect(port);
	sluice_redis_t *batched, *alone;
	take_t a[12], b[12];
	sluice_limit_t l[2], two[2];
	uv_loop_t loop;
	result_t multi = {0};
	char id[SLUICE_LIMIT_ID_MAX];
	size_t i;

	freeReplyObject(rh_cmd(c, "FLUSHALL"));
	fix_clock(c);
	uv_loop_init(&loop);
	batched = rs_client(&loop, port, 0);
	alone = rs_client(&loop, port, SLUICE_REDIS_NO_BATCH);
	rs_limit(&l[0], "5", "1/h");
	rs_limit(&l[1], "3", "2/s");
	two[0] = l[0];
	two[1] = l[1];
	for (i = 0; i < 12; i++) {
		snprintf(a[i].key, sizeof(a[i].key), "m%zu", i % 4);
		snprintf(b[i].key, sizeof(b[i].key), "n%zu", i % 4);
		a[i].limit = b[i].limit = &l[i % 2];
		a[i].cost = b[i].cost = 1 + i % 3;
		a[i].peek = b[i].peek = 0;
	}
	/* Take 7 is a peek (of a key of its own: it goes alone, ahead of
	 * the batch); key "bad" (take 5) holds a list. */
	a[7].peek = b[7].peek = 1;
	snprintf(a[7].key, sizeof(a[7].key), "p");
	snprintf(b[7].key, sizeof(b[7].key), "p");
	snprintf(a[5].key, sizeof(a[5].key), "bad");
	snprintf(b[5].key, sizeof(b[5].key), "bad");
	sluice_limit_id(&l[5 % 2], id);
	freeReplyObject(rh_cmd(c, "RPUSH sluice:{bad}:%s x", id));
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	/* The multi-limit take joins the same turn. */
	CHECK(sluice_redis_take(batched, "w", 1, two, 2, 1, on_result,
				&multi) == 0);
	run_turn(&loop, batched, a, 12);
	while (!multi.done)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(multi.status == 0 && multi.allowed);
	CHECK(rs_calls(c, "sluice.takemany") == 1);
	CHECK(rs_calls(c, "sluice.takemulti") == 1);
	CHECK(rs_calls(c, "sluice.takeeach") == 0 &&
	      rs_calls(c, "sluice.take") == 0);
	CHECK(rs_calls(c, "evalsha") == 1); /* the peek */
	run_turn(&loop, alone, b, 12);
	for (i = 0; i < 12; i++) {
		if (i == 5) {
			CHECK(a[i].res.status == SLUICE_ESTORE);
			CHECK(b[i].res.status == SLUICE_ESTORE);
			continue;
		}
		same_decision(&a[i].res, &b[i].res);
	}
	sluice_redis_free(batched);
	sluice_redis_free(alone);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	freeReplyObject(rh_cmd(c, "SLUICE.TESTCLOCK 0"));
	redisFree(c);
	printf("a mixed turn is one SLUICE.TAKEMANY; an error stays with its "
	       "own caller\n");
}

/* Takes gathered and not yet sent when the client is freed fail, each
 * once, and nothing leaks. */
static void test_free_fails_gathered_takes_once(int port)
{
	sluice_redis_t *r;
	take_t t[8];
	sluice_limit_t l;
	uv_loop_t loop;
	size_t i;

	uv_loop_init(&loop);
	r = rs_client(&loop, port, 0);
	rs_limit(&l, "5", "1/s");
	for (i = 0; i < 8; i++) {
		memset(&t[i].res, 0, sizeof(t[i].res));
		CHECK(sluice_redis_take(r, "x", 1, &l, 1, 1, on_result,
					&t[i].res) == 0);
	}
	sluice_redis_free(r);
	for (i = 0; i < 8; i++)
		CHECK(t[i].res.done && t[i].res.status == SLUICE_ESTORE);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	printf("freeing the client fails the gathered takes once each\n");
}

int main(void)
{
	static const char *const testclock[] = {"TESTCLOCK", NULL};
	rh_redis_t srv = {0};

	signal(SIGPIPE, SIG_IGN);
	srv.module = SLUICE_MODULE_PATH;
	srv.extra = testclock;
	rh_redis_start(&srv, 0, 0);
	test_takeeach_is_takes_one_after_the_other(srv.port);
	test_one_turn_of_one_limit_is_one_command(srv.port);
	test_mixed_turn_is_one_takemany_and_errors_stay_apart(srv.port);
	test_free_fails_gathered_takes_once(srv.port);
	rh_redis_stop(&srv);
	return 0;
}
