/*
 * test_redis_cluster.c -- the Redis store on a three-master Redis Cluster
 * (three redis-server --cluster-enabled yes on loopback, joined with
 * redis-cli --cluster create): keys spread over the masters decide
 * correctly, a slot migrated while decisions are in flight (ASK during
 * the move, MOVED after it) fails no decision and loses no charge, and a
 * request over keys on two masters is charged on each and refunded where
 * the other rejected.
 */
#include "redis_harness.h"
#include "sluice_redis.h"
#include "store/redis/redis_int.h"

#define NODES 3

static rh_redis_t servers[NODES];
static char seeds_buf[NODES][32];

static void cluster_start(void)
{
	rh_cluster_create(servers, NODES, NULL, seeds_buf);
}

static void cluster_stop(void)
{
	int i;

	for (i = 0; i < NODES; i++)
		rh_redis_stop(&servers[i]);
}

/* ------------------------------------------------------------ helpers */

typedef struct tally_s {
	int done, allowed, failed;
} tally_t;

static void on_tally(void *arg, int status, int allowed,
		     const sluice_decision_t *d, size_t which)
{
	tally_t *t = arg;

	t->done++;
	if (status)
		t->failed++;
	else if (allowed)
		t->allowed++;
}

static sluice_redis_t *client(uv_loop_t *loop)
{
	const char *seeds[1] = {seeds_buf[0]};
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char err[256];

	o.seeds = seeds;
	o.nseeds = 1;
	o.timeout_ms = 2000;
	o.connections = 2;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	return r;
}

static void limit(sluice_limit_t *l, uint64_t cap, const char *rate)
{
	CHECK(sluice_limit_parse(l, "1", rate, NULL, 0) == 0);
	CHECK(sluice_limit_init(l, cap, &l->rate, NULL, 0) == 0);
}

/* The hash-tag rule of Redis Cluster (checked against CLUSTER KEYSLOT). */
static void test_key_slots_match_redis(void)
{
	static const char *keys[] = {"sluice:{alice}:100@2/s",
				     "sluice:{alice}:1000@1000/h",
				     "plain",
				     "{}x",
				     "a{b}c{d}",
				     "{",
				     "x{}{y}",
				     ""};
	redisContext *c = rh_connect(servers[0].port);
	size_t i;

	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		redisReply *rep = rh_cmd(c, "CLUSTER KEYSLOT %s", keys[i]);

		CHECK(rep->integer ==
		      sluice_redis__key_slot(keys[i], strlen(keys[i])));
		freeReplyObject(rep);
	}
	redisFree(c);
	printf("key slots match CLUSTER KEYSLOT\n");
}

/* 300 keys over all masters: each allows exactly its capacity. */
static void test_keys_over_three_masters(void)
{
	uv_loop_t loop;
	sluice_redis_t *r;
	sluice_limit_t l[2];
	tally_t t = {0};
	int i, j, used[NODES] = {0};

	uv_loop_init(&loop);
	r = client(&loop);
	limit(&l[0], 5, "1/h");
	limit(&l[1], 100, "100/day");
	for (i = 0; i < 300; i++) {
		char key[16];
		int n = snprintf(key, sizeof(key), "user%d", i);

		for (j = 0; j < 7; j++)
			CHECK(sluice_redis_take(r, key, (size_t)n, l, 2, 1,
						on_tally, &t) == 0);
	}
	while (t.done < 300 * 7)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(t.failed == 0 && t.allowed == 300 * 5);
	/* Every master holds some of them. */
	for (i = 0; i < NODES; i++) {
		redisContext *c = rh_connect(servers[i].port);
		redisReply *rep = rh_cmd(c, "DBSIZE");

		used[i] = (int)rep->integer;
		freeReplyObject(rep);
		redisFree(c);
		CHECK(used[i] > 0);
	}
	CHECK(used[0] + used[1] + used[2] == 300 * 2);
	CHECK(sluice_redis_healthy(r));
	sluice_redis_free(r);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	printf("300 keys on three masters (%d/%d/%d states): each allowed "
	       "exactly its capacity\n",
	       used[0], used[1], used[2]);
}

/* ---------------------------------------------------- slot migration */

typedef struct migration_s {
	int slot;
	volatile int phase; /* 1 moving (ASK), 2 done (MOVED), 3 ended */
} migration_t;

static int owner_of(int slot, char ids[NODES][48])
{
	redisContext *c = rh_connect(servers[0].port);
	redisReply *rep = rh_cmd(c, "CLUSTER SLOTS");
	size_t i;
	int j, owner = -1;

	for (i = 0; i < rep->elements; i++) {
		redisReply *e = rep->element[i];

		if (slot >= e->element[0]->integer &&
		    slot <= e->element[1]->integer)
			for (j = 0; j < NODES; j++)
				if (e->element[2]->element[1]->integer ==
				    servers[j].port)
					owner = j;
	}
	freeReplyObject(rep);
	for (j = 0; j < NODES; j++) {
		redisContext *k = rh_connect(servers[j].port);
		redisReply *id = rh_cmd(k, "CLUSTER MYID");

		snprintf(ids[j], 48, "%s", id->str);
		freeReplyObject(id);
		redisFree(k);
	}
	redisFree(c);
	return owner;
}

/* Moves m->slot to the next master the way redis-cli does, pausing while
 * the keys sit on the target but the slot still belongs to the source
 * (the source answers ASK). */
static void *migrate(void *arg)
{
	migration_t *m = arg;
	char ids[NODES][48];
	int from = owner_of(m->slot, ids), to = (from + 1) % NODES, i;
	redisContext *src = rh_connect(servers[from].port);
	redisContext *dst = rh_connect(servers[to].port);
	redisReply *keys;
	size_t k;

	rh_sleep_ms(300);
	freeReplyObject(rh_cmd(dst, "CLUSTER SETSLOT %d IMPORTING %s", m->slot,
			       ids[from]));
	freeReplyObject(rh_cmd(src, "CLUSTER SETSLOT %d MIGRATING %s", m->slot,
			       ids[to]));
	keys = rh_cmd(src, "CLUSTER GETKEYSINSLOT %d 100", m->slot);
	for (k = 0; k < keys->elements; k++)
		freeReplyObject(rh_cmd(src, "MIGRATE 127.0.0.1 %d %s 0 5000",
				       servers[to].port,
				       keys->element[k]->str));
	freeReplyObject(keys);
	m->phase = 1;
	rh_sleep_ms(400);
	for (i = 0; i < NODES; i++) {
		redisContext *c = rh_connect(servers[i].port);

		freeReplyObject(rh_cmd(c, "CLUSTER SETSLOT %d NODE %s", m->slot,
				       ids[to]));
		redisFree(c);
	}
	m->phase = 2;
	rh_sleep_ms(400);
	m->phase = 3;
	redisFree(src);
	redisFree(dst);
	return NULL;
}

typedef struct hot_s {
	uv_loop_t *loop;
	sluice_redis_t *r;
	sluice_limit_t l[2];
	migration_t *m;
	uv_timer_t tick;
	tally_t t;
	int sent;
} hot_t;

static void on_hot_tick(uv_timer_t *tm)
{
	hot_t *h = tm->data;
	int i;

	/* Past the capacity (600) whatever the machine's speed: the
	 * migration ends on its own clock, the load on a count. */
	if (h->m->phase == 3 && h->sent >= 700) {
		uv_timer_stop(tm);
		return;
	}
	for (i = 0; i < 4; i++) {
		h->sent++;
		CHECK(sluice_redis_take(h->r, "hot", 3, h->l, 2, 1, on_tally,
					&h->t) == 0);
	}
}

static void test_slot_migration_mid_run(void)
{
	static hot_t h;
	migration_t m = {0, 0};
	uv_loop_t loop;
	pthread_t th;

	uv_loop_init(&loop);
	h.loop = &loop;
	h.r = client(&loop);
	h.m = &m;
	limit(&h.l[0], 600, "1/h");
	limit(&h.l[1], 100000, "10000/day");
	m.slot = sluice_redis__key_slot("sluice:{hot}:600@1/h", 20);
	uv_timer_init(&loop, &h.tick);
	h.tick.data = &h;
	uv_timer_start(&h.tick, on_hot_tick, 0, 5);
	CHECK(pthread_create(&th, NULL, migrate, &m) == 0);
	while (uv_is_active((uv_handle_t *)&h.tick) || h.t.done < h.sent)
		uv_run(&loop, UV_RUN_ONCE);
	pthread_join(th, NULL);
	printf("slot %d migrated mid-run: %d decisions, %d allowed, %d "
	       "failed; %llu ASK and %llu MOVED redirections followed\n",
	       m.slot, h.sent, h.t.allowed, h.t.failed,
	       (unsigned long long)h.r->asked, (unsigned long long)h.r->moved);
	CHECK(h.t.failed == 0);
	CHECK(h.sent > 600 && h.t.allowed == 600);
	CHECK(h.r->asked > 0 && h.r->moved > 0);
	uv_close((uv_handle_t *)&h.tick, NULL);
	sluice_redis_free(h.r);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
}

/* ------------------------------------------- several keys, two masters */

static void on_many(void *arg, int status, int allowed)
{
	on_tally(arg, status, allowed, NULL, 0);
}

static int node_of(sluice_redis_t *r, const char *key)
{
	char name[128];
	int n = snprintf(name, sizeof(name), "sluice:{%s}:0", key);

	return r->slots[sluice_redis__key_slot(name, (size_t)n)];
}

/* `racers` requests in flight, each over `wide` (a key on one master) and
 * `narrow` (20/day, a key found on another master, named from
 * narrow_prefix): 20 allowed, and once the refunds have landed `wide`
 * holds the charges of those 20 alone.  Returns what `wide` has left. */
static uint64_t race_two_masters(uv_loop_t *loop, sluice_redis_t *r, int racers,
				 const char *wide_key,
				 const sluice_limit_t *wide,
				 const char *narrow_prefix)
{
	static sluice_take_item_t it[200][2];
	static char narrow_key[32];
	sluice_limit_t narrow;
	tally_t t = {0}, peek = {0};
	sluice_take_item_t p;
	int i;

	CHECK(racers <= 200);
	limit(&narrow, 20, "20/day");
	for (i = 0;; i++) {
		snprintf(narrow_key, sizeof(narrow_key), "%s\x1fu%d",
			 narrow_prefix, i);
		if (node_of(r, narrow_key) >= 0 &&
		    node_of(r, narrow_key) != node_of(r, wide_key))
			break;
	}
	for (i = 0; i < racers; i++) {
		it[i][0] = (sluice_take_item_t){.key = wide_key,
						.keylen = strlen(wide_key),
						.limits = wide,
						.nlimits = 1,
						.cost = 1};
		it[i][1] = (sluice_take_item_t){.key = narrow_key,
						.keylen = strlen(narrow_key),
						.limits = &narrow,
						.nlimits = 1,
						.cost = 1};
		CHECK(sluice_redis_take_many(r, it[i], 2, on_many, &t) == 0);
	}
	while (t.done < racers || r->head)
		uv_run(loop, UV_RUN_ONCE); /* answers, then refunds */
	CHECK(t.failed == 0 && t.allowed == 20);
	p = (sluice_take_item_t){.key = wide_key,
				 .keylen = strlen(wide_key),
				 .limits = wide,
				 .nlimits = 1};
	CHECK(sluice_redis_take_many(r, &p, 1, on_many, &peek) == 0);
	while (!peek.done)
		uv_run(loop, UV_RUN_ONCE);
	CHECK(peek.failed == 0);
	return p.summary.remaining;
}

/* The race above on buckets. */
static void test_keys_on_two_masters_are_refunded(void)
{
	enum { RACERS = 200 };
	sluice_limit_t wide;
	const char *wide_key = "wide\x1f"
			       "192.0.2.7";
	uv_loop_t loop;
	sluice_redis_t *r;
	uint64_t left;

	uv_loop_init(&loop);
	r = client(&loop);
	limit(&wide, 1000, "1000/day");
	while (node_of(r, wide_key) < 0)
		uv_run(&loop, UV_RUN_ONCE); /* the slot map */
	left = race_two_masters(&loop, r, RACERS, wide_key, &wide, "narrow");
	CHECK(left == 980);
	sluice_redis_free(r);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	printf("%d requests over two masters: %d allowed, wide charged %d "
	       "after refunds\n",
	       RACERS, 20, 1000 - (int)left);
}

/* ----------------------------------------------------- calendar quotas */

static void month_quota(sluice_limit_t *l, uint64_t q)
{
	CHECK(sluice_quota_init(l, q, SLUICE_PER_MONTH, SLUICE_ALIGN_CALENDAR,
				0, NULL, 0) == 0);
}

/* Quotas route as buckets do (the key's hash tag): keys over three
 * masters, a quota beside a bucket on each, each key allowed exactly its
 * quota; and a take over two masters whose quota side is refunded when
 * the other master refuses (quota.lua's refund). */
static void test_quotas_over_three_masters(void)
{
	enum { KEYS = 120, RACERS = 100 };
	const char *wide_key = "qwide\x1f"
			       "192.0.2.8";
	sluice_limit_t l[2], wide;
	uv_loop_t loop;
	sluice_redis_t *r;
	tally_t t = {0};
	int i, j, used[NODES] = {0};

	uv_loop_init(&loop);
	r = client(&loop);
	month_quota(&l[0], 3);
	limit(&l[1], 100, "100/day");
	for (i = 0; i < KEYS; i++) {
		char key[16];
		int n = snprintf(key, sizeof(key), "quser%d", i);

		for (j = 0; j < 5; j++)
			CHECK(sluice_redis_take(r, key, (size_t)n, l, 2, 1,
						on_tally, &t) == 0);
	}
	while (t.done < KEYS * 5)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(t.failed == 0 && t.allowed == KEYS * 3);
	for (i = 0; i < NODES; i++) {
		redisContext *c = rh_connect(servers[i].port);
		redisReply *rep = rh_cmd(c, "KEYS *{quser*}:3@month");

		used[i] = (int)rep->elements;
		freeReplyObject(rep);
		redisFree(c);
		CHECK(used[i] > 0);
	}
	CHECK(used[0] + used[1] + used[2] == KEYS);

	month_quota(&wide, 1000);
	CHECK(race_two_masters(&loop, r, RACERS, wide_key, &wide, "qnarrow") ==
	      980);
	sluice_redis_free(r);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	printf("quotas over three masters (%d/%d/%d keys): each allowed "
	       "exactly its quota; a quota refunded across masters\n",
	       used[0], used[1], used[2]);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	cluster_start();
	test_key_slots_match_redis();
	test_keys_over_three_masters();
	test_slot_migration_mid_run();
	test_keys_on_two_masters_are_refunded();
	test_quotas_over_three_masters();
	cluster_stop();
	return 0;
}
