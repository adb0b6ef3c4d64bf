/*
 * test_redis_many.c -- sluice_redis_take_many() against a real
 * redis-server: every key of a request charged in one atomic call, so 200
 * requests in flight at once charge `wide` only for the 20 that `narrow`
 * allows; each key's own decision; a request over a thousand keys; and
 * the refund script, the exact inverse of a charge.
 */
#include "redis_harness.h"
#include "sluice_redis.h"
#include "store/redis/redis_int.h"

static void limit(sluice_limit_t *l, uint64_t cap, const char *rate)
{
	CHECK(sluice_limit_parse(l, "1", rate, NULL, 0) == 0);
	CHECK(sluice_limit_init(l, cap, &l->rate, NULL, 0) == 0);
}

static sluice_redis_t *client(uv_loop_t *loop, int port)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char url[64], err[256];

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	o.url = url;
	o.timeout_ms = 5000;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	return r;
}

static void item(sluice_take_item_t *it, const char *key,
		 const sluice_limit_t *l, size_t n, uint64_t cost)
{
	memset(it, 0, sizeof(*it));
	it->key = key;
	it->keylen = strlen(key);
	it->limits = l;
	it->nlimits = n;
	it->cost = cost;
}

typedef struct tally_s {
	int done, allowed, failed;
} tally_t;

static void on_many(void *arg, int status, int allowed)
{
	tally_t *t = arg;

	t->done++;
	if (status)
		t->failed++;
	else if (allowed)
		t->allowed++;
}

#define RACERS 200

static void test_racing_requests_charge_wide_only_for_the_allowed(int port)
{
	static sluice_take_item_t it[RACERS][2];
	sluice_limit_t wide, narrow;
	uv_loop_t loop;
	sluice_redis_t *r;
	tally_t t = {0};
	result_t res;
	int i;

	uv_loop_init(&loop);
	r = client(&loop, port);
	limit(&wide, 1000, "1000/day");
	limit(&narrow, 20, "20/day");
	for (i = 0; i < RACERS; i++) {
		item(&it[i][0],
		     "wide\x1f"
		     "192.0.2.7",
		     &wide, 1, 1);
		item(&it[i][1],
		     "narrow\x1f"
		     "mallory",
		     &narrow, 1, 1);
		CHECK(sluice_redis_take_many(r, it[i], 2, on_many, &t) == 0);
	}
	while (t.done < RACERS)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(t.failed == 0);
	CHECK(t.allowed == 20);
	/* The rejected ones say which key rejected them. */
	CHECK(it[RACERS - 1][0].allowed && !it[RACERS - 1][1].allowed);
	CHECK(it[RACERS - 1][1].summary.retry_after_us > 0);
	res = rh_take(&loop, r,
		      "wide\x1f"
		      "192.0.2.7",
		      &wide, 1, 0);
	CHECK(res.status == 0 && res.d.remaining == 980);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	printf("%d requests in flight at once: %d allowed, wide charged %d\n",
	       RACERS, t.allowed, 1000 - (int)res.d.remaining);
}

static void test_a_thousand_keys_in_one_take(int port)
{
	enum { N = 1024 };
	static sluice_take_item_t it[N];
	static char keys[N][16];
	sluice_limit_t l[2], last;
	uv_loop_t loop;
	sluice_redis_t *r;
	tally_t t = {0};
	result_t res;
	int i;

	uv_loop_init(&loop);
	r = client(&loop, port);
	limit(&l[0], 100, "1/h");
	limit(&l[1], 50, "1/day");
	limit(&last, 1, "1/h");
	for (i = 0; i < N; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%d", i);
		item(&it[i], keys[i], i == N - 1 ? &last : l,
		     i == N - 1 ? 1 : 2, 1);
	}
	for (i = 0; i < 3; i++)
		CHECK(sluice_redis_take_many(r, it, N, on_many, &t) == 0);
	while (t.done < 3)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(t.failed == 0 && t.allowed == 1);
	CHECK(it[0].summary.which == 1); /* 50/day is the tighter one */
	res = rh_take(&loop, r, "k0", l, 2, 0);
	CHECK(res.status == 0 && res.d.remaining == 49);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
}

/* refund.lua undoes a charge exactly: the state is what it was. */
static void test_refund_is_the_inverse_of_a_charge(int port)
{
	redisContext *c = rh_connect(port);
	sluice_limit_t l;
	uv_loop_t loop;
	sluice_redis_t *r;
	sluice_take_item_t it[2];
	tally_t t = {0};
	redisReply *before, *after, *rep;
	char need[32], id[SLUICE_LIMIT_ID_MAX + 1], rf[96], rf2[96];

	uv_loop_init(&loop);
	r = client(&loop, port);
	limit(&l, 10, "3/s"); /* per = 3: fractional states */
	id[sluice_limit_id(&l, id)] = '\0';
	snprintf(rf, sizeof(rf), "sluice:{rf}:%s", id);
	snprintf(rf2, sizeof(rf2), "sluice:{rf2}:%s", id);
	item(&it[0], "rf", &l, 1, 4);
	item(&it[1], "rf2", &l, 1, 1);
	CHECK(sluice_redis_take_many(r, it, 2, on_many, &t) == 0);
	while (t.done < 1)
		uv_run(&loop, UV_RUN_ONCE);
	before = rh_cmd(c, "GET %s", rf);
	CHECK(before->type == REDIS_REPLY_STRING);
	CHECK(sluice_redis_take_many(r, it, 2, on_many, &t) == 0);
	while (t.done < 2)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(t.allowed == 2);
	snprintf(need, sizeof(need), "%llu",
		 (unsigned long long)(4 * l.rate.interval));
	rep = rh_cmd(c, "EVAL %s 1 %s %s %u", sluice_redis__script_refund, rf,
		     need, l.rate.per);
	freeReplyObject(rep);
	after = rh_cmd(c, "GET %s", rf);
	CHECK(after->type == REDIS_REPLY_STRING);
	CHECK(strcmp(before->str, after->str) == 0);
	freeReplyObject(before);
	freeReplyObject(after);
	/* A refund of a bucket's only charge empties the key. */
	rep = rh_cmd(c, "EVAL %s 1 %s %llu %u", sluice_redis__script_refund,
		     rf2, (unsigned long long)(2 * l.rate.interval),
		     l.rate.per);
	freeReplyObject(rep);
	rep = rh_cmd(c, "EXISTS %s", rf2);
	CHECK(rep->integer == 0);
	freeReplyObject(rep);
	redisFree(c);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
}

/* The same limit twice in one item is one bucket, charged once; `which`
 * is the caller's first index for it. */
static void test_a_limit_given_twice_is_one_bucket(int port)
{
	sluice_limit_t l[3];
	uv_loop_t loop;
	sluice_redis_t *r;
	sluice_take_item_t it[2];
	tally_t t = {0};

	uv_loop_init(&loop);
	r = client(&loop, port);
	limit(&l[0], 100, "1/h");
	limit(&l[1], 4, "1/h");
	l[2] = l[1];
	item(&it[0], "dup", l, 3, 1);
	item(&it[1], "other", l, 1, 1);
	CHECK(sluice_redis_take_many(r, it, 2, on_many, &t) == 0);
	while (!t.done)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(t.allowed == 1);
	CHECK(it[0].summary.remaining == 3); /* not 2 */
	/* One key in two items: each is charged, the second from the state
	 * the first left (as the memory store does), never refused. */
	item(&it[1], "dup", l, 1, 1);
	t.done = 0;
	CHECK(sluice_redis_take_many(r, it, 2, on_many, &t) == 0);
	while (!t.done)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(t.allowed == 2 && t.failed == 0);
	CHECK(it[0].summary.remaining == 2);
	CHECK(it[0].summary.which == 1);
	CHECK(it[1].summary.remaining == 97);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
}

int main(void)
{
	rh_redis_t s = {0};

	signal(SIGPIPE, SIG_IGN);
	rh_redis_start(&s, 0, 0);
	test_racing_requests_charge_wide_only_for_the_allowed(s.port);
	test_a_thousand_keys_in_one_take(s.port);
	test_refund_is_the_inverse_of_a_charge(s.port);
	test_a_limit_given_twice_is_one_bucket(s.port);
	rh_redis_stop(&s);
	printf("ok\n");
	return 0;
}
