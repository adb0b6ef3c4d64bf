/*
 * test_redis_script.c -- the Lua script decides exactly as the core.
 *
 * Random sequences of requests (random limits, costs, clock steps forwards
 * and backwards, foreign states) go through src/core/decide.c and through
 * the store's Lua scripts (script.lua for one limit, script_multi.lua for
 * several) on a real redis-server; every shortfall the script answers,
 * every decision the client derives from it, every stored state and every
 * TTL must match the core's.  To replay a chosen clock the test runs a
 * copy of each script whose TIME call reads the time from two extra
 * arguments; nothing else in the scripts differs.
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

/* A script with redis.call('TIME') replaced by the last two ARGV. */
static char *replay_script(const char *s)
{
	const char *needle = "redis.call('TIME')";
	const char *repl = "{ARGV[#ARGV - 1], ARGV[#ARGV]}";
	const char *p = strstr(s, needle);
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

/* The server's real clock in us.  The replayed clock runs a day ahead of
 * it: the scripts write absolute expiries (PXAT), which the server would
 * act on at once if they were behind its own clock. */
static int64_t server_us(redisContext *c)
{
	redisReply *t = rh_cmd(c, "TIME");
	int64_t us = atoll(t->element[0]->str) * 1000000ll +
		     atoll(t->element[1]->str);

	freeReplyObject(t);
	return us;
}

/* decide.c's shortfall(), which the scripts answer: a second, independent
 * statement of it (saturated at 2^53). */
static uint64_t core_shortfall(sluice_state_t state, int64_t now, uint32_t per)
{
	const uint64_t cap = SLUICE_UNITS_MAX * 2;
	uint64_t frac, delta;

	if (state <= 0 || state / 1000 < now)
		return 0;
	frac = (uint64_t)(state % 1000);
	if (frac >= per)
		frac = per - 1;
	delta = (uint64_t)(state / 1000 - now);
	return delta >= cap / per ? cap : delta * per + frac;
}

/* One sequence of `steps` requests on a key with n limits. */
static void replay(redisContext *c, char *const scripts[2], int64_t base,
		   int seq, int steps)
{
	sluice_limit_t limits[4];
	sluice_state_t states[4] = {0}, next[4];
	sluice_decision_t ds[4], sum;
	size_t n = (size_t)rnd_in(1, 4), i, w;
	int64_t now = base + (int64_t)rnd_in(0, 1ull << 40);
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
		sluice_decision_t got;
		size_t which;
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
			now = base + (int64_t)rnd_in(0, 1ull << 40);
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
		w = sum.which;

#define NUM(v)                                                                 \
	(snprintf(nums[nn], 32, "%" PRIu64, (uint64_t)(v)),                    \
	 argv[argc] = nums[nn], argl[argc++] = strlen(nums[nn++]))
		argv[argc] = "EVAL", argl[argc++] = 4;
		argv[argc] = scripts[n > 1],
		argl[argc++] = strlen(scripts[n > 1]);
		NUM(n);
		for (i = 0; i < n; i++)
			argv[argc] = keys[i], argl[argc++] = strlen(keys[i]);
		/* As script.c sends them, except that per is always there
		 * (the replayed clock takes the last two ARGV; an absent
		 * per and "1" are the same to the script). */
		for (i = 0; i < n; i++) {
			NUM(cost > limits[i].capacity
				    ? limits[i].tau + 1
				    : cost * limits[i].rate.interval);
			NUM(limits[i].tau);
			NUM(limits[i].rate.per);
		}
		NUM(now / 1000000);
		NUM(now % 1000000);
#undef NUM
		rep = redisCommandArgv(c, argc, argv, argl);
		CHECK(rep != NULL);
		if (rep->type == REDIS_REPLY_ERROR)
			fprintf(stderr, "script error: %s\n", rep->str);
		CHECK(n == 1 ? rep->type == REDIS_REPLY_INTEGER
			     : rep->type == REDIS_REPLY_ARRAY &&
				       rep->elements == n);
		/* The shortfalls: exactly the core's. */
		for (i = 0; i < n; i++) {
			const redisReply *e = n == 1 ? rep : rep->element[i];
			uint64_t want = core_shortfall(states[i], now,
						       limits[i].rate.per);

			if (e->type != REDIS_REPLY_INTEGER ||
			    (uint64_t)e->integer != want) {
				fprintf(stderr,
					"seq %d step %d limit %zu: script D "
					"%lld, core %" PRIu64 "\n",
					seq, s, i, e->integer, want);
				exit(1);
			}
		}
		/* The decision the client derives: the core's. */
		CHECK(sluice_redis__parse_script_reply(rep, limits, n, cost,
						       &allowed, &got,
						       &which) == 0);
		if (allowed != sum.allowed || got.allowed != sum.allowed ||
		    got.limit != sum.limit || got.remaining != sum.remaining ||
		    got.never != sum.never ||
		    (!sum.never &&
		     got.retry_after_us !=
			     ceil_ms(sum.retry_after_us) * 1000) ||
		    got.reset_after_us != ceil_ms(sum.reset_after_us) * 1000 ||
		    which != w) {
			fprintf(stderr,
				"seq %d step %d n=%zu cost=%" PRIu64
				": client {%d %" PRIu64 " %" PRIu64 " %" PRIu64
				"us %" PRIu64 "us which %zu} core "
				"{%d %" PRIu64 " %" PRIu64 " %" PRIu64
				"us %" PRIu64 "us which %zu}\n",
				seq, s, n, cost, got.allowed, got.limit,
				got.remaining, got.retry_after_us,
				got.reset_after_us, which, sum.allowed,
				sum.limit, sum.remaining, sum.retry_after_us,
				sum.reset_after_us, w);
			exit(1);
		}
		freeReplyObject(rep);

		/* Stored states and their TTLs. */
		for (i = 0; i < n; i++) {
			redisReply *g = rh_cmd(c, "GET %s", keys[i]);

			if (next[i] == 0) {
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
				/* PXAT = the instant the core's state is
				 * full again, rounded up to a ms (never
				 * before it), as the module writes it. */
				redisReply *t =
					rh_cmd(c, "PEXPIRETIME %s", keys[i]);
				long long at = (long long)ceil_ms(
					(uint64_t)sluice_state_expiry_us(
						next[i]));

				if (t->integer != at) {
					fprintf(stderr,
						"seq %d step %d key %zu: "
						"PEXPIRETIME %lld, state %lld "
						"full at %lld ms\n",
						seq, s, i, t->integer,
						(long long)next[i], at);
					exit(1);
				}
				freeReplyObject(t);
			}
			states[i] = next[i];
		}
	}
}

static void test_script_equals_core(int port)
{
	redisContext *c = rh_connect(port);
	char *scripts[2] = {replay_script(sluice_redis__script),
			    replay_script(sluice_redis__script_multi)};
	int64_t base = server_us(c) + 86400000000ll;
	int seq;

	for (seq = 0; seq < 300; seq++)
		replay(c, scripts, base, seq, 40);
	printf("scripts == core over 300 random sequences x 40 steps\n");
	free(scripts[0]);
	free(scripts[1]);
	redisFree(c);
}

/* SCRIPT LOAD's answer is the SHA-1 the build computed for EVALSHA. */
static void test_script_sha_matches_server(int port)
{
	const char *scripts[5] = {
		sluice_redis__script, sluice_redis__script_multi,
		sluice_redis__script_refund, sluice_redis__script_adjust,
		sluice_redis__script_carry};
	const char *shas[5] = {sluice_redis__script_sha,
			       sluice_redis__script_multi_sha,
			       sluice_redis__script_refund_sha,
			       sluice_redis__script_adjust_sha,
			       sluice_redis__script_carry_sha};
	redisContext *c = rh_connect(port);
	redisReply *rep;
	int i;

	for (i = 0; i < 5; i++) {
		rep = rh_cmd(c, "SCRIPT LOAD %s", scripts[i]);
		CHECK(rep->type == REDIS_REPLY_STRING &&
		      strcmp(rep->str, shas[i]) == 0);
		freeReplyObject(rep);
	}
	redisFree(c);
}

/* The stored state is int-encoded (the cheapest a string can be). */
static void test_state_is_an_integer(int port)
{
	redisContext *c = rh_connect(port);
	redisReply *rep;

	/* one token of a bucket of 100 refilled 2/s */
	freeReplyObject(rh_cmd(c, "EVAL %s 1 enc{k}:0 500000 50000000",
			       sluice_redis__script));
	rep = rh_cmd(c, "OBJECT ENCODING enc{k}:0");
	CHECK(strcmp(rep->str, "int") == 0);
	freeReplyObject(rep);
	redisFree(c);
}

/*
 * adjust.lua (penalize, block) against sluice_penalize() and
 * sluice_block(): random limits, states and amounts, the script run at
 * the core's clock; the stored state must be the core's, digit for digit.
 * The arguments are computed as script.c's adjust_command() computes them.
 */
static void test_adjust_equals_core(int port)
{
	redisContext *c = rh_connect(port);
	char *adjust = replay_script(sluice_redis__script_adjust);
	char *ret = strstr(adjust, "\nreturn 0");
	int i, changed = 0;

	/* The replayed clock runs a day ahead of the server's (the
	 * expiries written are absolute).  The script reads back the state
	 * it wrote. */
	int64_t base = server_us(c) + 86400000000ll;

	CHECK(ret != NULL && strcmp(ret, "\nreturn 0\n") == 0);
	adjust = realloc(adjust, strlen(adjust) + 64);
	CHECK(adjust != NULL);
	strcpy(strstr(adjust, "\nreturn 0"),
	       "\nreturn redis.call('GET', KEYS[1])\n");

	for (i = 0; i < 3000; i++) {
		sluice_limit_t l;
		sluice_state_t state = 0, expect, next;
		sluice_decision_t d;
		int64_t now = base + (int64_t)rnd_in(0, 1ull << 40);
		uint64_t max, t, per, amount, add = 0, floor = 0;
		int block = (int)(rnd() % 2), k;
		char st[32], a1[32], a2[32], a3[32], a4[32], ts[32], tu[32];
		redisReply *r;

		random_limit(&l);
		max = sluice_debt_max_units(&l);
		t = l.rate.interval;
		per = l.rate.per;
		/* A state left by a few takes, maybe a penalty, maybe old. */
		for (k = (int)rnd_in(0, 3); k > 0; k--) {
			sluice_eval(&l, state, now, rnd_in(0, l.capacity),
				    &next, &d);
			state = next;
		}
		if (rnd() % 3 == 0)
			state = sluice_penalize(&l, state, now,
						rnd_in(0, 3 * l.capacity));
		if (rnd() % 5 == 0)
			now += (int64_t)rnd_in(0, 1ull << 36);
		amount = rnd() % 10 == 0 ? rnd() : rnd_in(0, 4 * l.capacity);
		if (block)
			amount =
				rnd() % 10 == 0 ? rnd() : rnd_in(0, 1ull << 30);
		expect = block ? sluice_block(&l, state, now, amount)
			       : sluice_penalize(&l, state, now, amount);
		if (!block)
			add = amount > max / t ? max : amount * t;
		else if (amount == 0)
			floor = 0;
		else if (amount > (max - l.tau + t) / (per * 1000))
			floor = max;
		else
			floor = amount * 1000 * per + l.tau - t;
		if (state > 0)
			freeReplyObject(
				rh_cmd(c, "SET adj{k} %lld", (long long)state));
		else
			freeReplyObject(rh_cmd(c, "DEL adj{k}"));
		snprintf(a1, sizeof(a1), "%" PRIu64, add);
		snprintf(a2, sizeof(a2), "%" PRIu64, floor);
		snprintf(a3, sizeof(a3), "%" PRIu64, max);
		snprintf(a4, sizeof(a4), "%" PRIu64, per);
		snprintf(ts, sizeof(ts), "%lld", (long long)(now / 1000000));
		snprintf(tu, sizeof(tu), "%lld", (long long)(now % 1000000));
		r = rh_cmd(c, "EVAL %s 1 adj{k} %s %s %s %s %s %s", adjust, a1,
			   a2, a3, a4, ts, tu);
		if (expect == 0) {
			CHECK(r->type == REDIS_REPLY_NIL);
		} else {
			snprintf(st, sizeof(st), "%lld", (long long)expect);
			if (r->type != REDIS_REPLY_STRING ||
			    strcmp(r->str, st) != 0)
				fprintf(stderr,
					"case %d: %s %" PRIu64 " on %lld: "
					"core %s, script %s\n",
					i, block ? "block" : "penalize", amount,
					(long long)state, st,
					r->type == REDIS_REPLY_STRING ? r->str
								      : "nil");
			CHECK(r->type == REDIS_REPLY_STRING &&
			      strcmp(r->str, st) == 0);
		}
		freeReplyObject(r);
		if (expect != state) {
			/* Written: PXAT = when it is full, rounded up. */
			r = rh_cmd(c, "PEXPIRETIME adj{k}");
			CHECK(r->type == REDIS_REPLY_INTEGER &&
			      r->integer ==
				      (long long)ceil_ms(
					      (uint64_t)sluice_state_expiry_us(
						      expect)));
			freeReplyObject(r);
		}
		changed += expect != state;
	}
	CHECK(changed > 1000);
	printf("adjust.lua == core over 3000 random penalties and blocks "
	       "(%d changed a state)\n",
	       changed);
	free(adjust);
	redisFree(c);
}

/* A random state of l at now: a few takes, maybe a penalty, maybe old,
 * maybe none. */
static sluice_state_t random_state(const sluice_limit_t *l, int64_t now)
{
	sluice_state_t state = 0, next;
	sluice_decision_t d;
	int k;

	if (rnd() % 4 == 0)
		return 0;
	for (k = (int)rnd_in(1, 4); k > 0; k--) {
		sluice_eval(l, state, now - (int64_t)rnd_in(0, 1ull << 34),
			    rnd_in(0, l->capacity), &next, &d);
		state = next;
	}
	if (rnd() % 4 == 0)
		state = sluice_penalize(l, state, now,
					rnd_in(0, 3 * l->capacity));
	return state;
}

static void put_state(redisContext *c, const char *key, sluice_state_t st)
{
	if (st > 0)
		freeReplyObject(rh_cmd(c, "SET %s %lld", key, (long long)st));
	else
		freeReplyObject(rh_cmd(c, "DEL %s", key));
}

/*
 * carry.lua against the local stores' carry (sluice_carry() on the first
 * earlier bucket holding state, only when the bucket now holds none):
 * random limits (the same rate at another capacity, or another rate),
 * random states in today's format (as script.lua and the module write
 * them), the script run at the core's clock.  The state it leaves is the
 * core's digit for digit, its expiry when it is full, and the earlier
 * buckets are gone.
 */
static void test_carry_equals_core(int port)
{
	redisContext *c = rh_connect(port);
	char *carry = replay_script(sluice_redis__script_carry);
	int64_t base = server_us(c) + 86400000000ll;
	int i, carried = 0;

	for (i = 0; i < 3000; i++) {
		sluice_limit_t to, from[2];
		sluice_state_t now_st, old[2], expect = 0;
		int64_t now = base + (int64_t)rnd_in(0, 1ull << 40);
		char a[8][32], st[32];
		size_t j;
		redisReply *r;

		random_limit(&to);
		for (j = 0; j < 2; j++) {
			random_limit(&from[j]);
			if (rnd() % 3 == 0) {
				/* Only the capacity changed. */
				uint64_t cap = rnd_in(1, 2 * to.capacity);

				if (sluice_limit_init(&from[j], cap, &to.rate,
						      NULL, 0) != 0)
					from[j] = to;
			}
			if (sluice_limit_same(&from[j], &to))
				random_limit(&from[j]);
			old[j] = random_state(&from[j], now);
		}
		if (sluice_limit_same(&from[0], &from[1]) ||
		    sluice_limit_same(&from[0], &to) ||
		    sluice_limit_same(&from[1], &to))
			continue;
		now_st = rnd() % 3 == 0 ? random_state(&to, now) : 0;
		if (now_st > now * 1000)
			expect = now_st;
		else
			for (j = 0; j < 2 && !expect; j++)
				if (old[j] > now * 1000)
					expect = sluice_carry(&from[j], old[j],
							      &to, now);
		put_state(c, "cn{k}", now_st);
		put_state(c, "c0{k}", old[0]);
		put_state(c, "c1{k}", old[1]);
		snprintf(a[0], 32, "%" PRIu64, to.rate.interval);
		snprintf(a[1], 32, "%" PRIu64, to.tau);
		snprintf(a[2], 32, "%u", to.rate.per);
		for (j = 0; j < 2; j++) {
			snprintf(a[3 + 2 * j], 32, "%" PRIu64,
				 from[j].rate.interval);
			snprintf(a[4 + 2 * j], 32, "%u", from[j].rate.per);
		}
		snprintf(a[7], 32, "%lld", (long long)(now / 1000000));
		freeReplyObject(rh_cmd(c,
				       "EVAL %s 3 cn{k} c0{k} c1{k} %s %s %s "
				       "%s %s %s %s %s %lld",
				       carry, a[0], a[1], a[2], a[3], a[4],
				       a[5], a[6], a[7],
				       (long long)(now % 1000000)));
		r = rh_cmd(c, "GET cn{k}");
		if (expect > 0) {
			snprintf(st, sizeof(st), "%lld", (long long)expect);
			if (r->type != REDIS_REPLY_STRING ||
			    strcmp(r->str, st) != 0)
				fprintf(stderr, "case %d: core %s, script %s\n",
					i, st,
					r->type == REDIS_REPLY_STRING ? r->str
								      : "nil");
			CHECK(r->type == REDIS_REPLY_STRING &&
			      strcmp(r->str, st) == 0);
		} else {
			/* Nothing to carry: the bucket is as it was. */
			CHECK(now_st == 0 ? r->type == REDIS_REPLY_NIL
					  : r->type == REDIS_REPLY_STRING &&
						    strtoll(r->str, NULL, 10) ==
							    now_st);
		}
		freeReplyObject(r);
		if (expect > 0 && expect != now_st) {
			r = rh_cmd(c, "PEXPIRETIME cn{k}");
			CHECK(r->type == REDIS_REPLY_INTEGER &&
			      r->integer ==
				      (long long)ceil_ms(
					      (uint64_t)sluice_state_expiry_us(
						      expect)));
			freeReplyObject(r);
			carried++;
		}
		r = rh_cmd(c, "EXISTS c0{k} c1{k}");
		CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 0);
		freeReplyObject(r);
	}
	CHECK(carried > 500);
	printf("carry.lua == core over 3000 random limit changes (%d "
	       "carried)\n",
	       carried);
	free(carry);
	redisFree(c);
}

int main(void)
{
	rh_redis_t s = {0};

	rh_redis_start(&s, 0, 0);
	test_script_sha_matches_server(s.port);
	test_state_is_an_integer(s.port);
	test_script_equals_core(s.port);
	test_adjust_equals_core(s.port);
	test_carry_equals_core(s.port);
	rh_redis_stop(&s);
	return 0;
}
