/*
 * test_redis_script.c -- the Lua script decides exactly as the core.
 *
 * Random sequences of requests (random limits, costs, clock steps forwards
 * and backwards, foreign states) go through src/core/decide.c and through
 * the store's Lua script on a real redis-server; every answer, every
 * stored state and every TTL must match.  To replay a chosen clock the
 * test runs a copy of the script whose TIME call reads the time from two
 * extra arguments; nothing else in the script differs.
 */
#include "redis_harness.h"
#include "sluice.h"
#include "store/redis/redis_int.h"

#include <inttypes.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static uint64_t rnd_in(uint64_t lo, uint64_t hi)
{
	return lo + rnd() % (hi - lo + 1);
}

/* The script with redis.call('TIME') replaced by the last two ARGV. */
static char *replay_script(void)
{
	const char *needle = "redis.call('TIME')";
	const char *repl = "{ARGV[#ARGV - 1], ARGV[#ARGV]}";
	const char *s = sluice_redis__script, *p = strstr(s, needle);
	char *out;

	CHECK(p != NULL);
	out = malloc(strlen(s) + strlen(repl) + 1);
	memcpy(out, s, (size_t)(p - s));
	strcpy(out + (p - s), repl);
	strcat(out, p + strlen(needle));
	return out;
}

static void random_limit(sluice_limit_t *l)
{
	sluice_rate_t rate;
	uint64_t cap;

	for (;;) {
		rate.per = (uint32_t)(rnd() % 4 == 0 ? 1 : rnd_in(1, 1000));
		switch (rnd() % 4) {
		case 0:
			rate.interval = rnd_in(1, 1000);
			break;
		case 1:
			rate.interval = rnd_in(1, 1000000);
			break;
		case 2:
			rate.interval = rnd_in(1, 86400000000ull);
			break;
		default:
			rate.interval = rnd_in(1, 1ull << 40);
		}
		cap = rnd() % 3 == 0 ? rnd_in(1, 5) : rnd_in(1, 100000);
		if (sluice_limit_init(l, cap, &rate, NULL, 0) == 0)
			return;
	}
}

static uint64_t ceil_ms(uint64_t us)
{
	return us / 1000 + (us % 1000 != 0);
}

/* One sequence of `steps` requests on a key with n limits. */
static void replay(redisContext *c, const char *script, int seq, int steps)
{
	sluice_limit_t limits[4];
	sluice_state_t states[4] = {0}, next[4];
	sluice_decision_t ds[4], sum;
	size_t n = (size_t)rnd_in(1, 4), i, w;
	int64_t now = 1764500000000000ll + (int64_t)rnd_in(0, 1ull << 40);
	char keys[4][64];
	int s;

	for (i = 0; i < n; i++) {
		random_limit(&limits[i]);
		snprintf(keys[i], sizeof(keys[i]), "t{seq%d}:%zu", seq, i);
	}
	for (s = 0; s < steps; s++) {
		const char *argv[4 + 4 + 12 + 3];
		size_t argl[4 + 4 + 12 + 3];
		char nums[24][32];
		int argc = 0, nn = 0, allowed;
		uint64_t cost, tau_us = limits[0].tau / limits[0].rate.per;
		redisReply *rep;

		/* The clock: mostly forwards by up to twice the time to
		 * full, sometimes backwards, sometimes years ahead. */
		switch (rnd() % 10) {
		case 0:
			now -= (int64_t)rnd_in(0, 5000000);
			break;
		case 1:
			now += (int64_t)rnd_in(0, 400ull * 86400000000ull);
			break;
		default:
			now += (int64_t)rnd_in(0, tau_us / 8 + 10);
		}
		/* States are int64 (tat_us * 1000): stay before ~2100, so
		 * the clock jumps back, far behind the stored states. */
		if (now > 4000000000000000ll)
			now = 1764500000000000ll +
			      (int64_t)rnd_in(0, 1ull << 40);
		cost = rnd() % 8 == 0 ? rnd_in(0, limits[0].capacity + 2)
				      : rnd_in(0, 3);
		/* Now and then a state written by someone else: empty,
		 * in the past, far in the future, a foreign fraction. */
		if (rnd() % 16 == 0) {
			i = (size_t)(rnd() % n);
			switch (rnd() % 4) {
			case 0:
				states[i] = 0;
				break;
			case 1:
				states[i] = (now - 1000) * 1000 + 999;
				break;
			case 2:
				states[i] =
					(now + (int64_t)rnd_in(0, 1ull << 50)) *
						1000 +
					(int64_t)rnd_in(0, 999);
				break;
			default:
				states[i] = (now + (int64_t)rnd_in(0, 1000)) *
						    1000 +
					    999;
			}
		}
		for (i = 0; i < n; i++) {
			if (states[i])
				freeReplyObject(rh_cmd(c, "SET %s %lld",
						       keys[i],
						       (long long)states[i]));
			else
				freeReplyObject(rh_cmd(c, "DEL %s", keys[i]));
		}

		sluice_eval_all(limits, states, n, now, cost, next, ds, &sum);
		w = 0;
		{
			sluice_decision_t m = ds[0];

			for (i = 1; i < n; i++)
				if (sluice_decision_merge(&m, &ds[i]))
					w = i;
		}

#define NUM(v)                                                                 \
	(snprintf(nums[nn], 32, "%" PRIu64, (uint64_t)(v)),                    \
	 argv[argc] = nums[nn], argl[argc++] = strlen(nums[nn++]))
		argv[argc] = "EVAL", argl[argc++] = 4;
		argv[argc] = script, argl[argc++] = strlen(script);
		NUM(n);
		for (i = 0; i < n; i++)
			argv[argc] = keys[i], argl[argc++] = strlen(keys[i]);
		NUM(cost);
		for (i = 0; i < n; i++) {
			NUM(limits[i].rate.interval);
			NUM(limits[i].rate.per);
			NUM(limits[i].capacity);
		}
		NUM(now / 1000000);
		NUM(now % 1000000);
#undef NUM
		rep = redisCommandArgv(c, argc, argv, argl);
		CHECK(rep != NULL);
		if (rep->type == REDIS_REPLY_ERROR)
			fprintf(stderr, "script error: %s\n", rep->str);
		CHECK(rep->type == REDIS_REPLY_ARRAY && rep->elements == 6);
		allowed = (int)rep->element[0]->integer;
		if (allowed != sum.allowed ||
		    (uint64_t)rep->element[1]->integer != sum.limit ||
		    (uint64_t)rep->element[2]->integer != sum.remaining ||
		    rep->element[3]->integer !=
			    (sum.never ? -1
				       : (long long)ceil_ms(
						 sum.retry_after_us)) ||
		    (uint64_t)rep->element[4]->integer !=
			    ceil_ms(sum.reset_after_us) ||
		    (size_t)rep->element[5]->integer != w) {
			fprintf(stderr,
				"seq %d step %d n=%zu cost=%" PRIu64
				": script {%lld %lld %lld %lld %lld %lld} core "
				"{%d %" PRIu64 " %" PRIu64 " %" PRIu64
				"us %" PRIu64 "us which %zu}\n",
				seq, s, n, cost, rep->element[0]->integer,
				rep->element[1]->integer,
				rep->element[2]->integer,
				rep->element[3]->integer,
				rep->element[4]->integer,
				rep->element[5]->integer, sum.allowed,
				sum.limit, sum.remaining, sum.retry_after_us,
				sum.reset_after_us, w);
			exit(1);
		}
		freeReplyObject(rep);

		/* Stored states and their TTLs. */
		for (i = 0; i < n; i++) {
			redisReply *g = rh_cmd(c, "GET %s", keys[i]);

			if (next[i] == 0 ||
			    (g->type == REDIS_REPLY_NIL && sum.allowed &&
			     cost > 0 && ds[i].reset_after_us <= 50000)) {
				/* absent, or written with a PX of a few ms
				 * that has run out in real time already */
				CHECK(g->type == REDIS_REPLY_NIL);
			} else {
				char want[32];

				snprintf(want, sizeof(want), "%lld",
					 (long long)next[i]);
				if (g->type != REDIS_REPLY_STRING ||
				    strcmp(g->str, want) != 0) {
					fprintf(stderr,
						"seq %d step %d key %zu: "
						"stored %s, core %s\n",
						seq, s, i,
						g->type == REDIS_REPLY_STRING
							? g->str
							: "(nil)",
						want);
					exit(1);
				}
			}
			freeReplyObject(g);
			if (sum.allowed && cost > 0) {
				redisReply *t = rh_cmd(c, "PTTL %s", keys[i]);
				long long px = (long long)ceil_ms(
					ds[i].reset_after_us);

				CHECK(t->integer <= px &&
				      t->integer > px - 1000 &&
				      (t->integer >= 0 || px <= 50));
				freeReplyObject(t);
			}
			states[i] = next[i];
		}
	}
}

static void test_script_equals_core(int port)
{
	redisContext *c = rh_connect(port);
	char *script = replay_script();
	int seq;

	for (seq = 0; seq < 300; seq++)
		replay(c, script, seq, 40);
	printf("script == core over 300 random sequences x 40 steps\n");
	free(script);
	redisFree(c);
}

/* SCRIPT LOAD's answer is the SHA-1 the client computed for EVALSHA. */
static void test_script_sha_matches_server(int port)
{
	redisContext *c = rh_connect(port);
	redisReply *rep = rh_cmd(c, "SCRIPT LOAD %s", sluice_redis__script);
	char sha[41];

	sluice_redis__sha1_hex(sluice_redis__script,
			       strlen(sluice_redis__script), sha);
	CHECK(rep->type == REDIS_REPLY_STRING && strcmp(rep->str, sha) == 0);
	freeReplyObject(rep);
	sluice_redis__sha1_hex("abc", 3, sha);
	CHECK(strcmp(sha, "a9993e364706816aba3e25717850c26c9cd0d89d") == 0);
	redisFree(c);
}

/* The stored state is int-encoded (the cheapest a string can be). */
static void test_state_is_an_integer(int port)
{
	redisContext *c = rh_connect(port);
	redisReply *rep;

	freeReplyObject(rh_cmd(c, "EVAL %s 1 enc{k}:0 1 500000 1 100",
			       sluice_redis__script));
	rep = rh_cmd(c, "OBJECT ENCODING enc{k}:0");
	CHECK(strcmp(rep->str, "int") == 0);
	freeReplyObject(rep);
	redisFree(c);
}

int main(void)
{
	rh_redis_t s = {0};

	rh_redis_start(&s, 0, 0);
	test_script_sha_matches_server(s.port);
	test_state_is_an_integer(s.port);
	test_script_equals_core(s.port);
	rh_redis_stop(&s);
	return 0;
}
