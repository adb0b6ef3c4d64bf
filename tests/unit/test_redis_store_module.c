/*
 * test_redis_store_module.c -- the Redis store and the module together,
 * through the one store interface (store/store.h: a backend opened with
 * sluice_backend_open(), every verb through be.ops): the store finds
 * SLUICE.TAKE on a server that has the module and sends every decision to
 * it (no script call); on a server without the module it uses the script;
 * stores on either path serve the same keys without losing or inventing a
 * token; and the same sequence of every verb on a module-backed store and
 * on a script-backed store gives the same decisions and stores the same
 * bytes, with the same expiry.
 *
 * A store takes the script path on a server with the module when its user
 * may not run COMMAND (an ACL): the handshake's COMMAND INFO is refused,
 * so the module is not found (src/store/redis/module_path.c).
 *
 * Needs SLUICE_MODULE_PATH (the built sluice-redis.so) and
 * SLUICE_FROZEN_CLOCK_PATH (tests/tools/frozen_clock.c, built), set by
 * CMake.
 */
#include "sluice.h"

#include "redis_stores.h"

#include <uv.h>

#ifndef SLUICE_MODULE_PATH
#error "SLUICE_MODULE_PATH must name the built sluice-redis.so"
#endif
#ifndef SLUICE_FROZEN_CLOCK_PATH
#error "SLUICE_FROZEN_CLOCK_PATH must name the built frozen_clock shim"
#endif

/* The user of the module's server that cannot see the module. */
#define SCRIPT_USER "lua"

/* The instant, in microseconds, the frozen servers' wall clocks stand at
 * (2027-01-15). */
#define FROZEN_US "1800000000123456"

/* A store on the server at port, as `user` (NULL: the default user). */
static void open_store(sluice_backend_t *be, uv_loop_t *loop, int port,
		       const char *user)
{
	char url[96];

	if (user)
		snprintf(url, sizeof(url), "redis://%s:%s@127.0.0.1:%d", user,
			 user, port);
	else
		snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
	rs_store_open(be, loop, url);
}

/* --------------------------------------------------------------- tests */

static void test_store_uses_the_module_when_loaded(int port)
{
	redisContext *c = rh_connect(port);
	sluice_limit_t l[2];
	sluice_backend_t be;
	uv_loop_t loop;
	rs_result_t res;
	int i;

	uv_loop_init(&loop);
	open_store(&be, &loop, port, NULL);
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	rs_limit(&l[0], "5", "1/h");
	for (i = 0; i < 5; i++) {
		res = rs_take(&be, &loop, "alice", l, 1, 1);
		CHECK(res.allowed && res.d.remaining == (uint64_t)(4 - i));
	}
	res = rs_take(&be, &loop, "alice", l, 1, 1);
	CHECK(!res.allowed && res.d.retry_after_us > 3590000000ull &&
	      res.d.retry_after_us <= 3600000000ull);
	/* The module reports milliseconds; the store passes them on. */
	CHECK(res.d.retry_after_us % 1000 == 0);
	res = rs_take(&be, &loop, "alice", l, 1, 6);
	CHECK(!res.allowed && res.d.never &&
	      res.d.retry_after_us == UINT64_MAX);
	/* Several limits: SLUICE.TAKEMULTI, all-or-nothing. */
	rs_limit(&l[0], "10", "1/s");
	rs_limit(&l[1], "2", "2/day");
	CHECK(rs_take(&be, &loop, "bob", l, 2, 1).allowed);
	CHECK(rs_take(&be, &loop, "bob", l, 2, 1).allowed);
	res = rs_take(&be, &loop, "bob", l, 2, 1);
	CHECK(!res.allowed && res.d.which == 1 && res.d.limit == 2);

	CHECK(rs_calls(c, "sluice.take") == 7);
	CHECK(rs_calls(c, "sluice.takemulti") == 3);
	CHECK(rs_calls(c, "evalsha") == 0 && rs_calls(c, "eval") == 0);
	rs_store_close(&be, &loop);
	uv_loop_close(&loop);
	redisFree(c);
	printf("the store sends every decision to the module when it is "
	       "loaded\n");
}

static void test_module_and_script_stores_share_buckets(int port)
{
	redisContext *c = rh_connect(port);
	sluice_backend_t mod, script;
	sluice_limit_t l;
	uv_loop_t loop;
	rs_result_t res;
	int i;

	uv_loop_init(&loop);
	open_store(&mod, &loop, port, NULL);
	open_store(&script, &loop, port, SCRIPT_USER);
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	rs_limit(&l, "8", "1/day");
	/* Alternating paths on one key: each take costs exactly one token. */
	for (i = 0; i < 8; i++) {
		res = rs_take(i % 2 ? &script : &mod, &loop, "carol", &l, 1, 1);
		CHECK(res.allowed && res.d.remaining == (uint64_t)(7 - i));
	}
	CHECK(!rs_take(&mod, &loop, "carol", &l, 1, 1).allowed);
	CHECK(!rs_take(&script, &loop, "carol", &l, 1, 1).allowed);
	CHECK(rs_calls(c, "sluice.take") == 5);
	CHECK(rs_calls(c, "evalsha") + rs_calls(c, "eval") >= 5);
	/* Both first: the loop runs until every client handle is closed. */
	sluice_backend_close(&mod);
	sluice_backend_close(&script);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	redisFree(c);
	printf("module and script stores share buckets token for token\n");
}

/*
 * A bucket is named by its limit, not by its position among the key's
 * limits, on both paths: a user drained on tier "free" (one limit) stays
 * drained when one request comes as tier "paid" (another limit first, then
 * free's); a rule that loses or gains a limit keeps the state of the limits
 * it still has; the same limit twice is one bucket, charged once.  The
 * drain goes through one path and the rest through the other.
 */
static void tier_switch(uv_loop_t *loop, sluice_backend_t *one,
			sluice_backend_t *other, const char *user,
			const char *fresh)
{
	sluice_limit_t free_[1], paid[2], grown[2], dup[2];
	rs_result_t res;
	int i;

	rs_limit(&free_[0], "5", "1/h");
	rs_limit(&paid[0], "100", "100/h");
	paid[1] = free_[0];
	for (i = 0; i < 5; i++)
		CHECK(rs_take(one, loop, user, free_, 1, 1).allowed);
	CHECK(!rs_take(one, loop, user, free_, 1, 1).allowed);
	res = rs_take(other, loop, user, paid, 2, 1);
	CHECK(!res.allowed && res.d.which == 1 && res.d.limit == 5);
	res = rs_take(one, loop, user, free_, 1, 1);
	CHECK(!res.allowed && res.d.remaining == 0);

	/* "paid" loses its second limit, then gains another in front. */
	for (i = 0; i < 3; i++)
		CHECK(rs_take(one, loop, fresh, paid, 2, 1).allowed);
	res = rs_take(other, loop, fresh, paid, 1, 1);
	CHECK(res.allowed && res.d.limit == 100 && res.d.remaining == 96);
	rs_limit(&grown[0], "1000", "1000/day");
	grown[1] = paid[0];
	res = rs_take(one, loop, fresh, grown, 2, 1);
	CHECK(res.allowed && res.d.which == 1 && res.d.remaining == 95);
	res = rs_take(other, loop, fresh, free_, 1, 0);
	CHECK(res.allowed && res.d.remaining == 2);

	/* The same limit twice: one bucket, charged once per request. */
	dup[0] = free_[0];
	dup[1] = free_[0];
	res = rs_take(other, loop, "dup", dup, 2, 1);
	CHECK(res.allowed && res.d.remaining == 4 && res.d.which == 0);
	res = rs_take(one, loop, "dup", free_, 1, 0);
	CHECK(res.allowed && res.d.remaining == 4);
}

static void test_switching_tiers_keeps_every_limit_state(int port)
{
	redisContext *c = rh_connect(port);
	sluice_backend_t mod, script;
	uv_loop_t loop;

	uv_loop_init(&loop);
	open_store(&mod, &loop, port, NULL);
	open_store(&script, &loop, port, SCRIPT_USER);
	freeReplyObject(rh_cmd(c, "FLUSHALL"));
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	tier_switch(&loop, &mod, &script, "tier-a", "reload-a");
	freeReplyObject(rh_cmd(c, "FLUSHALL"));
	tier_switch(&loop, &script, &mod, "tier-b", "reload-b");
	/* Both paths took part: the script store's takes were scripts. */
	CHECK(rs_calls(c, "sluice.take") > 0 &&
	      rs_calls(c, "sluice.takemulti") > 0);
	CHECK(rs_calls(c, "evalsha") + rs_calls(c, "eval") > 0);
	/* The key names every path uses. */
	{
		redisReply *rep = rh_cmd(c, "EXISTS sluice:{dup}:5@1/h");

		CHECK(rep->integer == 1);
		freeReplyObject(rep);
	}
	sluice_backend_close(&mod);
	sluice_backend_close(&script);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	redisFree(c);
	printf("switching tiers or limits keeps every limit's state, on both "
	       "paths\n");
}

static void test_store_uses_the_script_without_the_module(int port)
{
	redisContext *c = rh_connect(port);
	sluice_backend_t be;
	sluice_limit_t l;
	uv_loop_t loop;
	int i;

	uv_loop_init(&loop);
	open_store(&be, &loop, port, NULL);
	freeReplyObject(rh_cmd(c, "CONFIG RESETSTAT"));
	rs_limit(&l, "3", "1/h");
	for (i = 0; i < 3; i++)
		CHECK(rs_take(&be, &loop, "dave", &l, 1, 1).allowed);
	CHECK(!rs_take(&be, &loop, "dave", &l, 1, 1).allowed);
	CHECK(rs_calls(c, "evalsha") + rs_calls(c, "eval") >= 4);
	CHECK(rs_calls(c, "sluice.take") == 0);
	rs_store_close(&be, &loop);
	uv_loop_close(&loop);
	redisFree(c);
	printf("without the module the store uses the script\n");
}

/* ----------------------------------------- the same sequence, two paths */

/* One step: a verb on a key with one of the limit sets below. */
typedef struct step_s {
	rs_verb_t verb;
	const char *key;
	int set;
	uint64_t cost, ms;
	int allowed;	  /* take, peek, reserve: what the step must decide */
	uint64_t wait_us; /* reserve: the wait it must answer */
} step_t;

/* Every verb, on one limit and several, a limit given twice, a rate with
 * a fraction of a microsecond per token (50/min), a cost beyond the
 * capacity. */
static const step_t steps[] = {
	{RS_TAKE, "alice", 0, 1, 0, 1, 0},
	{RS_TAKE, "alice", 0, 1, 0, 1, 0},
	{RS_TAKE, "alice", 0, 2, 0, 1, 0},
	{RS_TAKE, "alice", 0, 1, 0, 1, 0},
	{RS_TAKE, "alice", 0, 1, 0, 0, 0},
	{RS_TAKE, "alice", 0, 6, 0, 0, 0},
	{RS_PEEK, "alice", 0, 0, 0, 1, 0},
	{RS_REFUND, "alice", 0, 3, 0, 0, 0},
	{RS_PEEK, "alice", 0, 3, 0, 1, 0},
	{RS_PEEK, "alice", 0, 4, 0, 0, 0},
	{RS_PENALIZE, "alice", 0, 2, 0, 0, 0},
	{RS_TAKE, "alice", 0, 1, 0, 1, 0},
	{RS_BLOCK, "alice", 0, 0, 90000, 0, 0},
	{RS_TAKE, "alice", 0, 1, 0, 0, 0},
	{RS_PEEK, "alice", 0, 1, 0, 0, 0},
	{RS_RESET, "alice", 0, 0, 0, 0, 0},
	{RS_TAKE, "alice", 0, 2, 0, 1, 0},
	{RS_TAKE, "bob", 1, 1, 0, 1, 0},
	{RS_TAKE, "bob", 1, 1, 0, 1, 0},
	{RS_TAKE, "bob", 1, 1, 0, 0, 0},
	{RS_REFUND, "bob", 1, 1, 0, 0, 0},
	{RS_TAKE, "bob", 1, 1, 0, 1, 0},
	{RS_PENALIZE, "bob", 1, 4, 0, 0, 0},
	{RS_TAKE, "bob", 1, 1, 0, 0, 0},
	{RS_RESET, "bob", 1, 0, 0, 0, 0},
	{RS_TAKE, "bob", 1, 2, 0, 1, 0},
	{RS_TAKE, "frac", 2, 3, 0, 1, 0},
	{RS_TAKE, "frac", 2, 3, 0, 1, 0},
	{RS_TAKE, "frac", 2, 3, 0, 0, 0},
	{RS_PEEK, "frac", 2, 1, 0, 1, 0},
	{RS_PENALIZE, "frac", 2, 1, 0, 0, 0},
	{RS_REFUND, "frac", 2, 3, 0, 0, 0},
	{RS_TAKE, "frac", 2, 3, 0, 1, 0},
	{RS_BLOCK, "frac", 2, 0, 1500, 0, 0},
	{RS_TAKE, "frac", 2, 1, 0, 0, 0},
	{RS_TAKE, "dup", 3, 1, 0, 1, 0},
	{RS_TAKE, "dup", 3, 4, 0, 1, 0},
	{RS_TAKE, "dup", 3, 1, 0, 0, 0},
	{RS_REFUND, "dup", 3, 1, 0, 0, 0},
	{RS_TAKE, "dup", 3, 1, 0, 1, 0},
	/* Reservations (ms: the longest wait): five tokens at once, the
	 * sixth an hour later, the seventh refused (its turn two hours
	 * on); a take refused meanwhile; a refund (an aborted wait) gives
	 * the last turn back; a cost beyond the capacity never; set leaves
	 * 3 tokens. */
	{RS_RESERVE, "q", 0, 1, 3600000, 1, 0},
	{RS_RESERVE, "q", 0, 2, 3600000, 1, 0},
	{RS_RESERVE, "q", 0, 2, 3600000, 1, 0},
	{RS_RESERVE, "q", 0, 1, 3600000, 1, 3600000000},
	{RS_RESERVE, "q", 0, 1, 7199999, 0, 7200000000},
	{RS_TAKE, "q", 0, 1, 0, 0, 0},
	{RS_REFUND, "q", 0, 1, 0, 0, 0},
	{RS_RESERVE, "q", 0, 1, 3600000, 1, 3600000000},
	{RS_RESERVE, "q", 0, 6, 86400000, 0, UINT64_MAX},
	{RS_SET, "q", 0, 3, 0, 0, 0},
	{RS_TAKE, "q", 0, 3, 0, 1, 0},
	{RS_TAKE, "q", 0, 1, 0, 0, 0},
	/* One token at 3/s (a third of a microsecond per token): turns
	 * 333334 and 666667 us on, the fraction kept in the state. */
	{RS_RESERVE, "f", 4, 1, 1000, 1, 0},
	{RS_RESERVE, "f", 4, 1, 1000, 1, 333334},
	{RS_RESERVE, "f", 4, 1, 1000, 1, 666667},
	{RS_RESERVE, "f", 4, 1, 999, 0, 1000000},
	/* Several limits: the 2/day one sets the turn (12 h), the 1/s one
	 * is charged at that turn; then set makes both full. */
	{RS_RESERVE, "m", 1, 1, 0, 1, 0},
	{RS_RESERVE, "m", 1, 1, 0, 1, 0},
	{RS_RESERVE, "m", 1, 1, 43200000, 1, 43200000000},
	{RS_RESERVE, "m", 1, 1, 0, 0, 86400000000},
	{RS_SET, "m", 1, 10, 0, 0, 0},
	{RS_TAKE, "m", 1, 2, 0, 1, 0},
	/* Cost 0 reserves nothing, and waits for nothing. */
	{RS_RESERVE, "z", 0, 0, 0, 1, 0},
};

/* The limit sets of the steps: sets[i][0..nset[i]). */
static sluice_limit_t sets[5][2];
static const size_t nset[5] = {1, 2, 1, 2, 1};

static void make_sets(void)
{
	rs_limit(&sets[0][0], "5", "1/h");
	rs_limit(&sets[1][0], "10", "1/s");
	rs_limit(&sets[1][1], "2", "2/day");
	rs_limit(&sets[2][0], "7", "50/min");
	rs_limit(&sets[3][0], "5", "1/h");
	sets[3][1] = sets[3][0];
	rs_limit(&sets[4][0], "1", "3/s");
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every key of the two servers: the same names, the same bytes (GET) and
 * the same expiry (PEXPIRETIME: the instant the state is full again,
 * rounded up to a ms, after the frozen clock).  Returns the count of
 * keys. */
static size_t same_keyspace(redisContext *a, redisContext *b)
{
	redisReply *ka = rh_cmd(a, "KEYS *"), *kb = rh_cmd(b, "KEYS *");
	char *na[64], *nb[64];
	size_t i, n = ka->elements;

	CHECK(ka->elements == kb->elements && n <= 64);
	for (i = 0; i < n; i++) {
		na[i] = ka->element[i]->str;
		nb[i] = kb->element[i]->str;
	}
	qsort(na, n, sizeof(na[0]), cmp_str);
	qsort(nb, n, sizeof(nb[0]), cmp_str);
	for (i = 0; i < n; i++) {
		redisReply *va = rh_cmd(a, "GET %s", na[i]);
		redisReply *vb = rh_cmd(b, "GET %s", nb[i]);

		CHECK(strcmp(na[i], nb[i]) == 0);
		CHECK(va->type == REDIS_REPLY_STRING &&
		      vb->type == REDIS_REPLY_STRING);
		if (va->len != vb->len || memcmp(va->str, vb->str, va->len)) {
			fprintf(stderr, "GET %s: module %s, script %s\n", na[i],
				va->str, vb->str);
			CHECK(0);
		}
		freeReplyObject(va);
		freeReplyObject(vb);
		va = rh_cmd(a, "PEXPIRETIME %s", na[i]);
		vb = rh_cmd(b, "PEXPIRETIME %s", nb[i]);
		if (vb->integer <= atoll(FROZEN_US) / 1000 ||
		    vb->integer != va->integer) {
			fprintf(stderr,
				"PEXPIRETIME %s: module %lld, script %lld\n",
				na[i], va->integer, vb->integer);
			CHECK(0);
		}
		freeReplyObject(va);
		freeReplyObject(vb);
	}
	freeReplyObject(ka);
	freeReplyObject(kb);
	return n;
}

static void same_result(const rs_result_t *a, const rs_result_t *b, size_t step)
{
	if (a->status == b->status && a->allowed == b->allowed &&
	    a->d.allowed == b->d.allowed && a->d.never == b->d.never &&
	    a->d.limit == b->d.limit && a->d.remaining == b->d.remaining &&
	    a->d.retry_after_us == b->d.retry_after_us &&
	    a->d.reset_after_us == b->d.reset_after_us &&
	    a->d.which == b->d.which && a->wait_us == b->wait_us &&
	    a->now_us == b->now_us)
		return;
	fprintf(stderr,
		"step %zu: module status %d allowed %d remaining %" PRIu64
		" retry %" PRIu64 " reset %" PRIu64 " which %zu; script "
		"status %d allowed %d remaining %" PRIu64 " retry %" PRIu64
		" reset %" PRIu64 " which %zu\n",
		step, a->status, a->allowed, a->d.remaining,
		a->d.retry_after_us, a->d.reset_after_us, a->d.which, b->status,
		b->allowed, b->d.remaining, b->d.retry_after_us,
		b->d.reset_after_us, b->d.which);
	CHECK(0);
}

/* The frozen clock is in effect: TIME answers the frozen instant. */
static void check_frozen(redisContext *c)
{
	redisReply *rep = rh_cmd(c, "TIME");

	CHECK(rep->type == REDIS_REPLY_ARRAY && rep->elements == 2);
	CHECK(atoll(rep->element[0]->str) == atoll(FROZEN_US) / 1000000 &&
	      atoll(rep->element[1]->str) == atoll(FROZEN_US) % 1000000);
	freeReplyObject(rep);
}

/* The servers' wall clocks stand at one instant (frozen_clock.c), so each
 * decision's times and each stored state are exact on both paths: equal,
 * not merely close.  Step after step, the module-backed store (a server
 * with the module) and the script-backed store (one without) decide
 * alike, and the two servers hold the same keys, bytes and expiries. */
static void test_same_sequence_same_decisions_and_state(int mod_port,
							int script_port)
{
	redisContext *cm = rh_connect(mod_port), *cs = rh_connect(script_port);
	const size_t n = sizeof(steps) / sizeof(steps[0]);
	sluice_backend_t mod, script;
	uv_loop_t loop;
	size_t i, keys = 0;

	check_frozen(cm);
	check_frozen(cs);
	make_sets();
	uv_loop_init(&loop);
	open_store(&mod, &loop, mod_port, NULL);
	open_store(&script, &loop, script_port, NULL);
	freeReplyObject(rh_cmd(cm, "CONFIG RESETSTAT"));
	for (i = 0; i < n; i++) {
		const step_t *s = &steps[i];
		rs_result_t a, b;

		a = rs_call(&mod, &loop, s->verb, s->key, sets[s->set],
			    nset[s->set], s->cost, s->ms);
		b = rs_call(&script, &loop, s->verb, s->key, sets[s->set],
			    nset[s->set], s->cost, s->ms);
		CHECK(a.status == 0);
		same_result(&a, &b, i);
		if ((s->verb == RS_TAKE || s->verb == RS_PEEK ||
		     s->verb == RS_RESERVE) &&
		    a.allowed != s->allowed) {
			fprintf(stderr, "step %zu: allowed %d, not %d\n", i,
				a.allowed, s->allowed);
			CHECK(0);
		}
		if (s->verb == RS_RESERVE && a.wait_us != s->wait_us) {
			fprintf(stderr,
				"step %zu: wait %" PRIu64 ", not %" PRIu64 "\n",
				i, a.wait_us, s->wait_us);
			CHECK(0);
		}
		keys = same_keyspace(cm, cs);
	}
	/* Every key (alice, bob's two buckets, frac, dup; q, f and m's two
	 * buckets) is stored. */
	CHECK(keys == 9);
	/* The module reserved one limit on its side. */
	CHECK(rs_calls(cm, "sluice.reserve") > 0);
	/* The module decided the takes on its side. */
	CHECK(rs_calls(cm, "sluice.take") > 0 &&
	      rs_calls(cm, "sluice.takemulti") > 0);
	CHECK(rs_calls(cs, "evalsha") + rs_calls(cs, "eval") > 0);
	sluice_backend_close(&mod);
	sluice_backend_close(&script);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	redisFree(cm);
	redisFree(cs);
	printf("one sequence of every verb: the same decisions and the same "
	       "stored state on the module and the script path\n");
}

int main(void)
{
	static const char *const frozen_env[] = {
		"LD_PRELOAD=" SLUICE_FROZEN_CLOCK_PATH,
		"FROZEN_CLOCK_US=" FROZEN_US, NULL};
	rh_redis_t with = {0}, without = {0}, fwith = {0}, fwithout = {0};
	redisContext *c;

	signal(SIGPIPE, SIG_IGN);
	with.module = SLUICE_MODULE_PATH;
	rh_redis_start(&with, 0, 0);
	rh_redis_start(&without, 0, 0);
	fwith.module = SLUICE_MODULE_PATH;
	fwith.env = frozen_env;
	rh_redis_start(&fwith, 0, 0);
	fwithout.env = frozen_env;
	rh_redis_start(&fwithout, 0, 0);
	/* The user that cannot see the module (see the top). */
	c = rh_connect(with.port);
	freeReplyObject(rh_cmd(c, "ACL SETUSER " SCRIPT_USER " on >" SCRIPT_USER
				  " ~* &* +@all -command"));
	redisFree(c);

	test_store_uses_the_module_when_loaded(with.port);
	test_module_and_script_stores_share_buckets(with.port);
	test_switching_tiers_keeps_every_limit_state(with.port);
	test_store_uses_the_script_without_the_module(without.port);
	test_same_sequence_same_decisions_and_state(fwith.port, fwithout.port);
	rh_redis_stop(&with);
	rh_redis_stop(&without);
	rh_redis_stop(&fwith);
	rh_redis_stop(&fwithout);
	return 0;
}
