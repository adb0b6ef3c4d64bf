/*
 * test_redis_store.c -- the Redis store through its real client, against
 * real redis-server processes: decisions, several limits all-or-nothing,
 * pipelining, NOSCRIPT recovery, a SIGKILLed and restarted Redis, a slow
 * Redis behind a delaying proxy, and Redis memory per key.
 */
#include "redis_harness.h"
#include "sluice_redis.h"
#include "store/redis/redis_int.h"
#include "util/loop_lag.h"

#include <inttypes.h>

/* ------------------------------------------------------------ helpers */

static void limit(sluice_limit_t *l, uint64_t cap, const char *rate)
{
	CHECK(sluice_limit_parse(l, "1", rate, NULL, 0) == 0);
	CHECK(sluice_limit_init(l, cap, &l->rate, NULL, 0) == 0);
}

static sluice_redis_t *client(uv_loop_t *loop, int port, unsigned timeout,
			      unsigned conns, const char *prefix)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char url[64], err[256];

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	o.url = url;
	o.timeout_ms = timeout;
	o.connections = conns;
	o.key_prefix = prefix;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	return r;
}

static int64_t now_ms(uv_loop_t *loop)
{
	return (int64_t)(uv_hrtime() / 1000000);
	(void)loop;
}

/* --------------------------------------------------------------- tests */

static void test_decisions_follow_the_bucket(int port)
{
	uv_loop_t loop;
	sluice_redis_t *r;
	sluice_limit_t l;
	result_t res;
	int i;

	uv_loop_init(&loop);
	r = client(&loop, port, 2000, 1, NULL);
	limit(&l, 5, "1/h");
	for (i = 0; i < 5; i++) {
		res = rh_take(&loop, r, "alice", &l, 1, 1);
		CHECK(res.status == 0 && res.allowed);
		CHECK(res.d.remaining == (uint64_t)(4 - i));
		CHECK(res.d.limit == 5 && res.d.retry_after_us == 0);
	}
	res = rh_take(&loop, r, "alice", &l, 1, 1);
	CHECK(res.status == 0 && !res.allowed && res.d.remaining == 0);
	/* One token an hour: the next one is at most an hour away. */
	CHECK(res.d.retry_after_us > 3590000000ull &&
	      res.d.retry_after_us <= 3600000000ull);
	CHECK(res.d.reset_after_us > 5 * 3590000000ull &&
	      res.d.reset_after_us <= 5 * 3600000000ull);
	/* More than the capacity can never pass. */
	res = rh_take(&loop, r, "bob", &l, 1, 6);
	CHECK(res.status == 0 && !res.allowed && res.d.never &&
	      res.d.retry_after_us == UINT64_MAX);
	/* cost 0 peeks. */
	res = rh_take(&loop, r, "alice", &l, 1, 0);
	CHECK(res.status == 0 && res.allowed && res.d.remaining == 0);
	CHECK(sluice_redis_healthy(r));
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	printf("decisions follow the bucket\n");
}

/* A request that fails its daily limit takes nothing from its burst. */
static void test_multi_limit_all_or_nothing(int port)
{
	redisContext *c = rh_connect(port);
	sluice_limit_t l[2];
	redisReply *before, *after;
	sluice_redis_t *r;
	uv_loop_t loop;
	result_t res;
	int i;

	uv_loop_init(&loop);
	r = client(&loop, port, 2000, 1, "m:");
	limit(&l[0], 10, "1/s");  /* burst */
	limit(&l[1], 3, "3/day"); /* daily */
	for (i = 0; i < 3; i++) {
		res = rh_take(&loop, r, "carol", l, 2, 1);
		CHECK(res.status == 0 && res.allowed);
	}
	before = rh_cmd(c, "GET m:{carol}:10@1/s");
	CHECK(before->type == REDIS_REPLY_STRING);
	for (i = 0; i < 5; i++) {
		res = rh_take(&loop, r, "carol", l, 2, 1);
		CHECK(res.status == 0 && !res.allowed);
		CHECK(res.which == 1 && res.d.limit == 3);
		CHECK(res.d.retry_after_us > 28000000000ull);
	}
	after = rh_cmd(c, "GET m:{carol}:10@1/s");
	CHECK(strcmp(before->str, after->str) == 0);
	freeReplyObject(before);
	freeReplyObject(after);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	redisFree(c);
	printf("multi-limit: a daily rejection charges nothing to the burst\n");
}

/* Decisions in flight share the connections; the bucket stays exact. */
typedef struct many_s {
	int done, allowed, failed;
} many_t;

static void on_many(void *arg, int status, int allowed,
		    const sluice_decision_t *d, size_t which)
{
	many_t *m = arg;

	m->done++;
	if (status)
		m->failed++;
	else if (allowed)
		m->allowed++;
}

static void test_pipelined_calls_share_one_bucket(int port)
{
	uv_loop_t loop;
	sluice_redis_t *r;
	sluice_limit_t l;
	many_t m = {0};
	int i;

	uv_loop_init(&loop);
	r = client(&loop, port, 5000, 2, NULL);
	limit(&l, 100, "1/h");
	for (i = 0; i < 1000; i++)
		CHECK(sluice_redis_take(r, "dave", 4, &l, 1, 1, on_many, &m) ==
		      0);
	while (m.done < 1000)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(m.failed == 0 && m.allowed == 100);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	printf("1000 pipelined calls, capacity 100: 100 allowed\n");
}

/* SCRIPT FLUSH between two calls: the second still succeeds. */
static void test_noscript_is_recovered(int port)
{
	redisContext *c = rh_connect(port);
	uv_loop_t loop;
	sluice_redis_t *r;
	sluice_limit_t l, two[2];
	many_t m = {0};
	result_t res;
	int i;

	uv_loop_init(&loop);
	r = client(&loop, port, 2000, 1, "ns:");
	limit(&l, 1000, "1/h");
	res = rh_take(&loop, r, "erin", &l, 1, 1);
	CHECK(res.status == 0 && res.allowed);
	freeReplyObject(rh_cmd(c, "SCRIPT FLUSH"));
	res = rh_take(&loop, r, "erin", &l, 1, 1);
	CHECK(res.status == 0 && res.allowed && res.d.remaining == 998);
	/* Several limits: the other script, flushed as well. */
	two[0] = l;
	limit(&two[1], 5, "3/s");
	freeReplyObject(rh_cmd(c, "SCRIPT FLUSH"));
	res = rh_take(&loop, r, "erin", two, 2, 1);
	CHECK(res.status == 0 && res.allowed && res.d.remaining == 4 &&
	      res.which == 1);
	/* Many in flight when the script disappears. */
	freeReplyObject(rh_cmd(c, "SCRIPT FLUSH"));
	for (i = 0; i < 200; i++)
		CHECK(sluice_redis_take(r, "erin", 4, &l, 1, 1, on_many, &m) ==
		      0);
	while (m.done < 200)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(m.failed == 0 && m.allowed == 200);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	redisFree(c);
	printf("NOSCRIPT after SCRIPT FLUSH recovered\n");
}

/* ------------------------------------------- load while Redis misbehaves */

#define LOAD_SLOTS 8192

typedef struct load_s load_t;
typedef struct load_call_s {
	load_t *load;
	int64_t sent_ms;
} load_call_t;

struct load_s {
	uv_loop_t *loop;
	sluice_redis_t *r;
	sluice_limit_t limit;
	uv_timer_t tick;
	int64_t start_ms, end_ms;
	unsigned per_tick;
	load_call_t calls[LOAD_SLOTS];
	unsigned next;
	long sent, ok, timedout, failed, outstanding;
	int64_t max_wait_ms;
	int64_t last_fail_ms, first_ok_after_ms, back_at_ms;
	unsigned max_inflight;
	int unhealthy_seen;
	/* The loop's own lag over the runs (util/loop_lag.h), in ms: what a
	 * busy machine added to every wait.  A wait is bounded by the
	 * timeout plus this plus LOAD_SLACK_MS, never by a fixed figure
	 * that holds only on an idle machine. */
	int64_t max_lag_ms;
};

/* What a wait may exceed timeout + lag by: the lag is sampled every
 * LAG_EVERY_MS (a deadline may fall that much before a sample's due
 * time), and ms rounding of the deadline and the clocks. */
#define LAG_EVERY_MS  10
#define LOAD_SLACK_MS (LAG_EVERY_MS + 40)

static void on_load(void *arg, int status, int allowed,
		    const sluice_decision_t *d, size_t which)
{
	load_call_t *c = arg;
	load_t *l = c->load;
	int64_t now = now_ms(l->loop), wait = now - c->sent_ms;

	l->outstanding--;
	if (wait > l->max_wait_ms)
		l->max_wait_ms = wait;
	if (status == 0) {
		l->ok++;
		if (l->back_at_ms && !l->first_ok_after_ms &&
		    now >= l->back_at_ms)
			l->first_ok_after_ms = now;
	} else {
		l->last_fail_ms = now;
		if (status == SLUICE_ETIMEDOUT)
			l->timedout++;
		else
			l->failed++;
	}
}

static void on_tick(uv_timer_t *t)
{
	load_t *l = t->data;
	int64_t now = now_ms(l->loop);
	unsigned i, j;

	if (now >= l->end_ms) {
		uv_timer_stop(t);
		return;
	}
	if (!sluice_redis_healthy(l->r))
		l->unhealthy_seen = 1;
	for (i = 0; i < l->r->nnodes; i++)
		for (j = 0; j < l->r->nconns; j++)
			if (l->r->nodes[i]->conns[j].inflight > l->max_inflight)
				l->max_inflight =
					l->r->nodes[i]->conns[j].inflight;
	for (i = 0; i < l->per_tick; i++) {
		load_call_t *c = &l->calls[l->next++ % LOAD_SLOTS];
		char key[32];
		int n = snprintf(key, sizeof(key), "load%u", l->next % 64);

		c->load = l;
		c->sent_ms = now;
		l->sent++;
		l->outstanding++;
		CHECK(sluice_redis_take(l->r, key, (size_t)n, &l->limit, 1, 1,
					on_load, c) == 0);
	}
}

static void load_run(load_t *l, uv_loop_t *loop, sluice_redis_t *r,
		     int duration_ms, unsigned per_tick)
{
	sluice_loop_lag_t lag;
	int64_t lag_ms;

	l->loop = loop;
	l->r = r;
	limit(&l->limit, 1000000, "1000/s");
	l->per_tick = per_tick;
	l->start_ms = now_ms(loop);
	l->end_ms = l->start_ms + duration_ms;
	uv_timer_init(loop, &l->tick);
	l->tick.data = l;
	CHECK(sluice_loop_lag_start(&lag, loop, LAG_EVERY_MS, NULL, NULL) == 0);
	uv_timer_start(&l->tick, on_tick, 0, 2);
	while (uv_is_active((uv_handle_t *)&l->tick) || l->outstanding > 0)
		uv_run(loop, UV_RUN_ONCE);
	lag_ms = (int64_t)((sluice_loop_lag_max(&lag) + 999999) / 1000000);
	if (lag_ms > l->max_lag_ms)
		l->max_lag_ms = lag_ms;
	sluice_loop_lag_close(&lag, NULL);
	uv_close((uv_handle_t *)&l->tick, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
}

/* Kills Redis with SIGKILL at 500 ms and restarts it at 1500 ms, from a
 * thread so the loop keeps sending. */
typedef struct chaos_s {
	rh_redis_t *server;
	volatile int64_t back_ms;
	volatile int finished;
} chaos_t;

static void *chaos(void *arg)
{
	chaos_t *ch = arg;

	rh_sleep_ms(500);
	rh_redis_kill(ch->server, SIGKILL);
	rh_sleep_ms(1000);
	rh_redis_start(ch->server, ch->server->port, 0);
	ch->back_ms = (int64_t)(uv_hrtime() / 1000000);
	/* The server gets PR_SET_PDEATHSIG from this thread: it would die
	 * with it, so the thread lives until the test is over. */
	while (!ch->finished)
		rh_sleep_ms(5);
	return NULL;
}

static void test_sigkill_and_restart(rh_redis_t *s)
{
	static load_t l;
	uv_loop_t loop;
	sluice_redis_t *r;
	chaos_t ch = {s, 0, 0};
	pthread_t t;
	const unsigned timeout = 50;

	memset(&l, 0, sizeof(l));
	uv_loop_init(&loop);
	r = client(&loop, s->port, timeout, 2, "kill:");
	CHECK(pthread_create(&t, NULL, chaos, &ch) == 0);
	/* The restart time is only known once the thread sets it. */
	l.back_at_ms = INT64_MAX;
	load_run(&l, &loop, r, 600, 4);
	while (!ch.back_ms)
		rh_sleep_ms(1);
	l.back_at_ms = ch.back_ms;
	load_run(&l, &loop, r, 1500, 4);
	printf("SIGKILL + restart: %ld sent, %ld ok, %ld timed out, %ld "
	       "failed fast; longest wait %" PRId64
	       " ms; first success %" PRId64 " ms after Redis was back; "
	       "loop lag at most %" PRId64 " ms\n",
	       l.sent, l.ok, l.timedout, l.failed, l.max_wait_ms,
	       l.first_ok_after_ms - l.back_at_ms, l.max_lag_ms);
	CHECK(l.failed + l.timedout > 0 && l.ok > 0);
	CHECK(l.max_wait_ms <= timeout + l.max_lag_ms + LOAD_SLACK_MS);
	/* Reconnecting takes at most the backoff's ceiling (200 ms) and a
	 * handshake: well inside a second, plus what the machine's
	 * scheduling added. */
	CHECK(l.first_ok_after_ms &&
	      l.first_ok_after_ms - l.back_at_ms <= 1000 + l.max_lag_ms);
	CHECK(sluice_redis_healthy(r));
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	rh_redis_stop(s);
	ch.finished = 1;
	pthread_join(t, NULL);
}

/* A Redis slower than timeout_ms: calls time out on time, connections do
 * not collect more than their in-flight cap, the store reports unhealthy. */
static void test_slow_redis(int redis_port)
{
	static load_t l;
	uv_loop_t loop;
	sluice_redis_t *r;
	int pport = 0;
	pid_t proxy = rh_proxy_start(&pport, redis_port, 300);
	const unsigned timeout = 50;

	memset(&l, 0, sizeof(l));
	uv_loop_init(&loop);
	r = client(&loop, pport, timeout, 1, "slow:");
	load_run(&l, &loop, r, 1500, 100);
	printf("slow Redis (300 ms behind a proxy, timeout 50 ms): %ld sent, "
	       "%ld ok, %ld timed out, %ld failed fast; longest wait %" PRId64
	       " ms; most in flight on a connection %u; loop lag at most "
	       "%" PRId64 " ms\n",
	       l.sent, l.ok, l.timedout, l.failed, l.max_wait_ms,
	       l.max_inflight, l.max_lag_ms);
	CHECK(l.timedout > 0 && l.failed > 0);
	/* No caller waits for the slow Redis beyond the timeout, except for
	 * what the loop itself was late by (a busy machine): a wait that
	 * exceeds both is the client holding a decision past its deadline. */
	CHECK(l.max_wait_ms <= timeout + l.max_lag_ms + LOAD_SLACK_MS);
	CHECK(l.max_inflight <= SLUICE_REDIS_MAX_INFLIGHT);
	CHECK(l.unhealthy_seen);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	rh_proc_kill(proxy);
}

/* A caller who sends more takes than a connection may carry at once,
 * without letting the loop run (no reply can come back meanwhile): the
 * connection holds SLUICE_REDIS_MAX_INFLIGHT of them and no more; every
 * one past the cap fails at once, synchronously, as a store error (its
 * node reported with the kind "saturated", the first few, before the
 * breaker opens and refuses the rest by itself); those in flight are all
 * decided.  The cap bounds what a burst can pile onto a slow Redis. */
static long cap_saturated;

static void on_cap_report(void *arg, const sluice_redis_node_report_t *rep)
{
	(void)arg;
	if (rep->error == SLUICE_REDIS_ERR_SATURATED)
		cap_saturated++;
}

static void test_inflight_cap_refuses_fast(int port)
{
	const int extra = 100, total = SLUICE_REDIS_MAX_INFLIGHT + extra;
	sluice_redis_opts_t o = {0};
	uv_loop_t loop;
	sluice_redis_t *r;
	sluice_limit_t l;
	many_t m = {0};
	char url[64], err[256];
	int i;

	uv_loop_init(&loop);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	o.url = url;
	o.timeout_ms = 60000; /* nothing here may time out */
	o.connections = 1;
	o.key_prefix = "cap:";
	o.flags = SLUICE_REDIS_NO_BATCH; /* one command per take */
	o.on_report = on_cap_report;
	CHECK(sluice_redis_open(&r, &loop, &o, err, sizeof(err)) == 0);
	CHECK(rh_wait_healthy(&loop, r, 10000));
	limit(&l, 1000000, "1000/s");
	cap_saturated = 0;
	for (i = 0; i < total; i++)
		CHECK(sluice_redis_take(r, "frank", 5, &l, 1, 1, on_many, &m) ==
		      0);
	/* Answered already, before the loop ran: exactly those past the
	 * cap, all failed. */
	CHECK(m.done == extra && m.failed == extra);
	CHECK(r->nodes[0]->conns[0].inflight == SLUICE_REDIS_MAX_INFLIGHT);
	CHECK(cap_saturated >= 1 && cap_saturated <= extra);
	while (m.done < total)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(m.failed == extra && m.allowed == SLUICE_REDIS_MAX_INFLIGHT);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	printf("%d takes sent at once on one connection: %d in flight, %d "
	       "failed at once (%ld reported saturated)\n",
	       total, SLUICE_REDIS_MAX_INFLIGHT, extra, cap_saturated);
}

/* ----------------------------------------------------------- memory */

typedef struct fill_s {
	uv_loop_t *loop;
	sluice_redis_t *r;
	sluice_limit_t limit;
	int total, sent, done, failed, keylen;
} fill_t;

static void fill_more(fill_t *f);

static void on_fill(void *arg, int status, int allowed,
		    const sluice_decision_t *d, size_t which)
{
	fill_t *f = arg;

	f->done++;
	if (status || !allowed)
		f->failed++;
	fill_more(f);
}

static void fill_more(fill_t *f)
{
	while (f->sent < f->total && f->sent - f->done < 1000) {
		char key[64];

		snprintf(key, sizeof(key), "%0*d", f->keylen, f->sent++);
		CHECK(sluice_redis_take(f->r, key, (size_t)f->keylen, &f->limit,
					1, 1, on_fill, f) == 0);
	}
}

/* used_memory growth per key for `n` fresh keys named
 * <prefix>{<keylen digits>}:100@1/h */
static double bytes_per_key(int port, const char *prefix, int keylen, int n)
{
	redisContext *c = rh_connect(port);
	fill_t f = {0};
	uv_loop_t loop;
	long long m0, m1;

	freeReplyObject(rh_cmd(c, "FLUSHALL"));
	uv_loop_init(&loop);
	f.loop = &loop;
	f.r = client(&loop, port, 5000, 2, prefix);
	f.total = n;
	f.keylen = keylen;
	limit(&f.limit, 100, "1/h");
	/* Connections and script first, so they are in the baseline. */
	{
		result_t res = rh_take(&loop, f.r, "warmup", &f.limit, 1, 1);

		CHECK(res.status == 0);
		freeReplyObject(rh_cmd(c, "DEL %s{warmup}:100@1/h", prefix));
	}
	m0 = rh_info_int(c, "memory", "used_memory");
	fill_more(&f);
	while (f.done < f.total)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(f.failed == 0);
	m1 = rh_info_int(c, "memory", "used_memory");
	{
		redisReply *sz = rh_cmd(c, "DBSIZE");

		CHECK(sz->integer == n);
		freeReplyObject(sz);
	}
	rh_close_client(&loop, f.r);
	uv_loop_close(&loop);
	redisFree(c);
	return (double)(m1 - m0) / n;
}

/*
 * Redis's own cost of a key with a TTL is about 112 B (entry, key, value
 * object, expiry entry) plus one bucket pointer per key in each of its two
 * hash tables, which grow in powers of two: at 100k keys the tables are
 * 76% full and add ~21 B per key, at 131k keys (just under 2^17) ~16 B.
 * The bound is checked where the tables are full; both are printed.
 */
static void test_memory_per_key(int port)
{
	/* "{" + 6 + "}:100@1/h": 16-byte Redis keys. */
	double b100 = bytes_per_key(port, "", 6, 100000);
	double b131 = bytes_per_key(port, "", 6, 131000);
	double b27 = bytes_per_key(port, "sluice:", 16, 100000);

	printf("Redis memory per key (value + TTL, 16-byte key names): %.1f B "
	       "at 100k keys, %.1f B at 131k keys (full hash tables); %.1f B "
	       "at 100k keys named \"sluice:{<16 bytes>}:100@1/h\"\n",
	       b100, b131, b27);
	CHECK(b131 <= 128);
}

int main(void)
{
	rh_redis_t s = {0};

	signal(SIGPIPE, SIG_IGN);
	rh_redis_start(&s, 0, 0);
	test_decisions_follow_the_bucket(s.port);
	test_multi_limit_all_or_nothing(s.port);
	test_pipelined_calls_share_one_bucket(s.port);
	test_noscript_is_recovered(s.port);
	test_inflight_cap_refuses_fast(s.port);
	/* Before the memory test: the proxy is a fork of this process, and
	 * every page it shares with it costs this process a copy when
	 * written; forked after the memory test's allocations (and under
	 * ASan their quarantine), that was hundreds of ms of page copies in
	 * one loop turn. */
	test_slow_redis(s.port);
	test_sigkill_and_restart(&s); /* stops the server */
	rh_redis_start(&s, 0, 0);
	test_memory_per_key(s.port);
	rh_redis_stop(&s);
	return 0;
}
