/*
 * test_redis_shapes.c -- every shape of a Redis call answers with the
 * same decision: a one-key take (script or module), a take_many of one
 * item (a one-key call of its own) and of several; the limit a decision
 * names is the caller's index in every one of them, in the summary and
 * in `which` alike.  Against a real redis-server.
 */
#include "redis_harness.h"
#include "sluice_redis.h"

static void limit(sluice_limit_t *l, uint64_t cap, const char *rate)
{
	CHECK(sluice_limit_parse(l, "1", rate, NULL, 0) == 0);
	CHECK(sluice_limit_init(l, cap, &l->rate, NULL, 0) == 0);
}

static sluice_redis_t *client(uv_loop_t *loop, int port, unsigned flags)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char url[64], err[256];

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	o.url = url;
	o.timeout_ms = 5000;
	o.flags = flags;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	return r;
}

typedef struct many_s {
	int done, status, allowed;
} many_t;

static void on_many(void *arg, int status, int allowed)
{
	many_t *m = arg;

	m->done = 1;
	m->status = status;
	m->allowed = allowed;
}

static void take_items(uv_loop_t *loop, sluice_redis_t *r,
		       sluice_take_item_t *it, size_t n, many_t *m)
{
	memset(m, 0, sizeof(*m));
	CHECK(sluice_redis_take_many(r, it, n, on_many, m) == 0);
	while (!m->done)
		uv_run(loop, UV_RUN_ONCE);
	CHECK(m->status == 0);
}

/* Limits [big, big, small]: the duplicate is one bucket, and the
 * deciding limit is the small one, the caller's index 2 (not its index
 * among the distinct limits, 1). */
static void test_which_is_the_callers_index(int port, unsigned flags)
{
	sluice_limit_t l[3];
	sluice_take_item_t it[2];
	uv_loop_t loop;
	sluice_redis_t *r;
	result_t res;
	many_t m;
	char key[64], other[64];

	snprintf(key, sizeof(key), "which-%u", flags);
	snprintf(other, sizeof(other), "which-other-%u", flags);
	uv_loop_init(&loop);
	r = client(&loop, port, flags);
	limit(&l[0], 100, "1/h");
	l[1] = l[0];
	limit(&l[2], 4, "1/h");

	res = rh_take(&loop, r, key, l, 3, 1);
	CHECK(res.status == 0 && res.allowed == 1);
	CHECK(res.which == 2);
	CHECK(res.d.which == 2);
	CHECK(res.d.remaining == 3);

	/* One item: the same decision, on the same buckets. */
	memset(it, 0, sizeof(it));
	it[0].key = key;
	it[0].keylen = strlen(key);
	it[0].limits = l;
	it[0].nlimits = 3;
	it[0].cost = 1;
	take_items(&loop, r, it, 1, &m);
	CHECK(m.allowed == 1 && it[0].allowed == 1);
	CHECK(it[0].summary.which == 2);
	CHECK(it[0].summary.remaining == 2);

	/* Two items: each item's own decision, the same index. */
	it[1] = it[0];
	it[1].key = other;
	it[1].keylen = strlen(other);
	take_items(&loop, r, it, 2, &m);
	CHECK(m.allowed == 1);
	CHECK(it[0].summary.which == 2 && it[0].summary.remaining == 1);
	CHECK(it[1].summary.which == 2 && it[1].summary.remaining == 3);

	/* A one-item take that rejects charges nothing and says so. */
	it[0].cost = 5;
	take_items(&loop, r, it, 1, &m);
	CHECK(m.allowed == 0 && it[0].allowed == 0);
	CHECK(it[0].summary.which == 2);
	res = rh_take(&loop, r, key, l, 3, 0);
	CHECK(res.d.remaining == 1);

	rh_close_client(&loop, r);
	uv_loop_close(&loop);
}

/* A malformed item is refused up front by every entry point alike. */
static void test_one_item_check(int port)
{
	sluice_limit_t l;
	sluice_take_item_t it;
	uv_loop_t loop;
	sluice_redis_t *r;
	many_t m = {0};

	uv_loop_init(&loop);
	r = client(&loop, port, 0);
	limit(&l, 4, "1/h");
	memset(&it, 0, sizeof(it));
	it.key = "k";
	it.keylen = 1;
	it.limits = &l;
	it.nlimits = 0;
	CHECK(sluice_redis_take_many(r, &it, 1, on_many, &m) == SLUICE_EINVAL);
	CHECK(sluice_redis_refund(r, &it, 1, on_many, &m) == SLUICE_EINVAL);
	CHECK(sluice_redis_take(r, "k", 1, &l, 0, 1, on_result, NULL) ==
	      SLUICE_EINVAL);
	it.nlimits = 1;
	it.keylen = 70000;
	CHECK(sluice_redis_take_many(r, &it, 1, on_many, &m) == SLUICE_EINVAL);
	CHECK(sluice_redis_reset(r, &it, 1, on_many, &m) == SLUICE_EINVAL);
	CHECK(m.done == 0);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
}

int main(void)
{
	rh_redis_t s = {0};

	signal(SIGPIPE, SIG_IGN);
	rh_redis_start(&s, 0, 0);
	test_which_is_the_callers_index(s.port, 0);
	test_which_is_the_callers_index(s.port, SLUICE_REDIS_SCRIPT_ONLY);
	test_one_item_check(s.port);
	rh_redis_stop(&s);
	printf("ok\n");
	return 0;
}
