/*
 * test_redis_quota.c -- calendar quotas (sluice_quota.h) on every store:
 * one table of quota sequences (takes, peeks, refunds, resets, penalties,
 * blocks, sets; quotas alone and beside a token bucket) run on the memory
 * store, the shared-memory store, the Redis store's script path
 * (quota.lua) and a Redis store on a server with the module, each through
 * the one store interface, with equal answers; across midnight, the end
 * of a month, a zone's midnight (Europe/Berlin), a zone whose hours start
 * at :30 (Asia/Kolkata), a week's end and first-use windows.
 *
 * The servers' clocks stand still at an instant the test chooses and
 * steps (tests/tools/frozen_clock.c reading FROZEN_CLOCK_FILE), so the
 * script (TIME) and the module decide at the instant the local stores are
 * given; the client's own clock, which only places the calendar windows
 * it sends to the script, is moved to the same instant
 * (sluice_redis__quota_skew_us).
 *
 * Beside the table: the script and the module store the same bytes with
 * the same expiry (first-use months and years from the 31st and from a
 * leap day included); a client whose clock is far off is refused, never
 * allowed, and writes nothing; a bucket in today's format is read by a
 * call that mixes it with a quota; the module refuses bad quota
 * arguments with clear errors.  It prints the bytes a quota's key costs
 * in Redis (MEMORY USAGE).
 *
 * Needs SLUICE_MODULE_PATH and SLUICE_FROZEN_CLOCK_PATH, set by CMake.
 */
#include "sluice.h"

#include "redis_stores.h"
#include "store/redis/redis_int.h"
#include "stores.h"

#include <fcntl.h>
#include <unistd.h>
#include <uv.h>

#ifndef SLUICE_MODULE_PATH
#error "SLUICE_MODULE_PATH must name the built sluice-redis.so"
#endif
#ifndef SLUICE_FROZEN_CLOCK_PATH
#error "SLUICE_FROZEN_CLOCK_PATH must name the built frozen_clock shim"
#endif

#define NSTORES 4
#define S_TO_US INT64_C(1000000)

/* 2027-01-31 23:59:58 UTC, a Sunday: two seconds before a new day, a
 * new month and a new ISO week; 00:59:58 in Berlin (CET), 05:29:58 in
 * Kolkata (IST, +05:30: its hours start at half past UTC's). */
#define T0 INT64_C(1801439998)

static char clock_path[64];
static int64_t now_us; /* the instant every store decides at */

/* Sets the servers' clocks, the client's and the local stores' to us. */
static void set_clock(int64_t us)
{
	char buf[32];
	int fd, n = snprintf(buf, sizeof(buf), "%lld\n", (long long)us);

	fd = open(clock_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, buf, (size_t)n) == n);
	close(fd);
	now_us = us;
	sluice_redis__quota_skew_us = us - sluice_now_us();
}

/* ------------------------------------------------------------ limits */

enum {
	DAY3,	     /* 3 a day (UTC) */
	MONTH5,	     /* 5 a month (UTC) */
	BERLIN4,     /* 4 a day in Europe/Berlin */
	FIRST_MONTH, /* 2 a month from the first request */
	WEEK3,	     /* 3 an ISO week */
	KOLKATA1,    /* 1 an hour in Asia/Kolkata */
	YEAR10,	     /* 10 a year */
	FIRST_YEAR,  /* 1 a year from the first request */
	BUCKET3,     /* a token bucket: 3 at 3/h */
	NLIMITS
};

static sluice_limit_t limits[NLIMITS];

static void quota(int i, uint64_t q, uint8_t per, uint8_t align,
		  const char *zone)
{
	uint16_t id = 0;
	char err[256];

	if (zone)
		CHECK(sluice_zone_load(zone, &id, err, sizeof(err)) == 0);
	if (sluice_quota_init(&limits[i], q, per, align, id, err,
			      sizeof(err)) != 0) {
		fprintf(stderr, "quota %d: %s\n", i, err);
		CHECK(0);
	}
}

static void limits_init(void)
{
	quota(DAY3, 3, SLUICE_PER_DAY, SLUICE_ALIGN_CALENDAR, NULL);
	quota(MONTH5, 5, SLUICE_PER_MONTH, SLUICE_ALIGN_CALENDAR, NULL);
	quota(BERLIN4, 4, SLUICE_PER_DAY, SLUICE_ALIGN_CALENDAR,
	      "Europe/Berlin");
	quota(FIRST_MONTH, 2, SLUICE_PER_MONTH, SLUICE_ALIGN_FIRST_USE, NULL);
	quota(WEEK3, 3, SLUICE_PER_WEEK, SLUICE_ALIGN_CALENDAR, NULL);
	quota(KOLKATA1, 1, SLUICE_PER_HOUR, SLUICE_ALIGN_CALENDAR,
	      "Asia/Kolkata");
	quota(YEAR10, 10, SLUICE_PER_YEAR, SLUICE_ALIGN_CALENDAR, NULL);
	quota(FIRST_YEAR, 1, SLUICE_PER_YEAR, SLUICE_ALIGN_FIRST_USE, NULL);
	rs_limit(&limits[BUCKET3], "3", "3/h");
}

/* ------------------------------------------------------------ stores */

typedef rs_store_t store_t; /* redis_stores.h's four */

/* A carry (store.h's carry verb): to lims[0] from lims[1..]. */
#define V_CARRY ((rs_verb_t)100)
/* A reservation's longest wait. */
#define MAX_WAIT_US (3600 * S_TO_US)

/* One call of verb on key under lims (-1 ends) at now_us, answered. */
static rs_result_t call(store_t *s, rs_verb_t verb, const char *key,
			const int *lims, uint64_t cost)
{
	const sluice_store_ops_t *ops = s->be.ops;
	sluice_limit_t ls[4];
	sluice_take_item_t it = {0};
	rs_result_t res = {0};
	int rc = SLUICE_EINVAL;
	size_t n;

	for (n = 0; n < 4 && lims[n] >= 0; n++)
		ls[n] = limits[lims[n]];
	it.key = key;
	it.keylen = strlen(key);
	it.limits = ls;
	it.nlimits = n;
	it.cost = cost;
	switch ((int)verb) {
	case RS_TAKE:
		rc = ops->take(s->be.impl, &it, 1, now_us, rs_on_done, &res);
		break;
	case RS_PEEK:
		rc = ops->peek(s->be.impl, &it, 1, now_us, rs_on_done, &res);
		break;
	case RS_RESET:
		rc = ops->reset(s->be.impl, &it, 1, rs_on_done, &res);
		break;
	case RS_REFUND:
		rc = ops->refund(s->be.impl, &it, 1, now_us, rs_on_done, &res);
		break;
	case RS_PENALIZE:
		rc = ops->penalize(s->be.impl, &it, 1, now_us, rs_on_done,
				   &res);
		break;
	case RS_BLOCK:
		rc = ops->block(s->be.impl, &it, 1, cost, now_us, rs_on_done,
				&res);
		break;
	case RS_SET:
		rc = ops->set(s->be.impl, &it, 1, cost, now_us, rs_on_done,
			      &res);
		break;
	case RS_RESERVE:
		rc = ops->reserve(s->be.impl, &it, MAX_WAIT_US, now_us,
				  rs_on_reserved, &res);
		break;
	case V_CARRY: {
		sluice_carry_item_t ci = {key, strlen(key), &ls[0], &ls[1],
					  n - 1};

		rc = ops->carry(s->be.impl, &ci, 1, now_us, rs_on_done, &res);
		break;
	}
	default:
		break;
	}
	CHECK(rc == 0);
	if (s->loop)
		rs_wait(s->loop, &res);
	CHECK(res.done);
	if (verb == RS_TAKE || verb == RS_PEEK)
		res.d = it.summary;
	if (verb == RS_RESERVE)
		CHECK(res.allowed ? res.wait_us <= MAX_WAIT_US
				  : res.d.retry_after_us > 0);
	return res;
}

static uint64_t ms_up(uint64_t us)
{
	return us == UINT64_MAX ? us : (us + 999) / 1000;
}

/* ------------------------------------------------------------- table */

typedef struct row_s {
	const char *what;
	int64_t at; /* seconds after T0 */
	rs_verb_t verb;
	const char *key;
	int lims[4];
	uint64_t cost; /* the cost; a block's ms; a set's remaining */
	int allowed;   /* takes and peeks */
	uint64_t remaining;
} row_t;

#define L1(a)                                                                  \
	{                                                                      \
		a, -1                                                          \
	}
#define L2(a, b)                                                               \
	{                                                                      \
		a, b, -1                                                       \
	}

/* In order; each row runs on the states the rows before it left. */
static const row_t table[] = {
	{"a day's quota of 3: the first", 0, RS_TAKE, "a", L1(DAY3), 1, 1, 2},
	{"the second", 0, RS_TAKE, "a", L1(DAY3), 1, 1, 1},
	{"the third at 23:59:59", 1, RS_TAKE, "a", L1(DAY3), 1, 1, 0},
	{"the fourth at 23:59:59: refused", 1, RS_TAKE, "a", L1(DAY3), 1, 0, 0},
	{"a peek says the same", 1, RS_PEEK, "a", L1(DAY3), 1, 0, 0},
	{"00:00:00: a new day, remaining 2", 2, RS_TAKE, "a", L1(DAY3), 1, 1,
	 2},
	{"a month's quota: 4 of 5 on the 31st", 0, RS_TAKE, "m", L1(MONTH5), 4,
	 1, 1},
	{"2 more on the 31st: refused", 1, RS_TAKE, "m", L1(MONTH5), 2, 0, 1},
	{"on the 1st: a new month", 2, RS_TAKE, "m", L1(MONTH5), 2, 1, 3},
	{"Berlin's day: all 4 at 00:59:58 there", 0, RS_TAKE, "z", L1(BERLIN4),
	 4, 1, 0},
	{"UTC midnight is no midnight in Berlin: refused", 2, RS_TAKE, "z",
	 L1(BERLIN4), 1, 0, 0},
	{"first use: a month from Jan 31 23:59:58", 0, RS_TAKE, "f",
	 L1(FIRST_MONTH), 1, 1, 1},
	{"the calendar's new month changes nothing", 2, RS_TAKE, "f",
	 L1(FIRST_MONTH), 1, 1, 0},
	{"until Feb 28 23:59:58: refused", 2, RS_TAKE, "f", L1(FIRST_MONTH), 1,
	 0, 0},
	{"a week's quota on Sunday", 0, RS_TAKE, "w", L1(WEEK3), 3, 1, 0},
	{"Monday 00:00: a new week", 2, RS_TAKE, "w", L1(WEEK3), 1, 1, 2},
	{"Kolkata's hour (05:29:58 there)", 0, RS_TAKE, "h", L1(KOLKATA1), 1, 1,
	 0},
	{"UTC's new hour is half past five there: refused", 2, RS_TAKE, "h",
	 L1(KOLKATA1), 1, 0, 0},
	{"a year's quota spent in 2027", 0, RS_TAKE, "y", L1(YEAR10), 10, 1, 0},
	{"still 2027: refused", 2, RS_TAKE, "y", L1(YEAR10), 1, 0, 0},
	{"more than a quota: never", 2, RS_TAKE, "n", L1(DAY3), 4, 0, 3},
	{"a bucket and a quota: the bucket leaves less", 2, RS_TAKE, "x",
	 L2(BUCKET3, MONTH5), 2, 1, 1},
	{"the bucket refuses: neither is charged", 2, RS_TAKE, "x",
	 L2(BUCKET3, MONTH5), 2, 0, 1},
	{"the quota kept its 3 (a peek of 3 passes, leaving 0)", 2, RS_PEEK,
	 "x", L1(MONTH5), 3, 1, 0},
	{"the bucket kept its token", 2, RS_TAKE, "x", L1(BUCKET3), 1, 1, 0},
	{"a month spent", 2, RS_TAKE, "xq", L1(MONTH5), 5, 1, 0},
	{"the quota refuses: the bucket is not charged", 2, RS_TAKE, "xq",
	 L2(BUCKET3, MONTH5), 1, 0, 0},
	{"the bucket is full", 2, RS_TAKE, "xq", L1(BUCKET3), 3, 1, 0},
	{"a refund gives the day's one back", 2, RS_REFUND, "a", L1(DAY3), 1, 0,
	 0},
	{"so 2 are left after one more", 2, RS_TAKE, "a", L1(DAY3), 1, 1, 2},
	{"a refund of more than was used", 2, RS_REFUND, "a", L1(DAY3), 5, 0,
	 0},
	{"leaves the quota unused", 2, RS_TAKE, "a", L1(DAY3), 1, 1, 2},
	{"a penalty past the quota", 2, RS_PENALIZE, "p", L1(DAY3), 5, 0, 0},
	{"spends the day", 2, RS_TAKE, "p", L1(DAY3), 1, 0, 0},
	{"a block", 2, RS_BLOCK, "k", L1(DAY3), 1000, 0, 0},
	{"spends the day too", 2, RS_TAKE, "k", L1(DAY3), 1, 0, 0},
	{"set: 1 left", 2, RS_SET, "s", L1(DAY3), 1, 0, 0},
	{"the one", 2, RS_TAKE, "s", L1(DAY3), 1, 1, 0},
	{"and no more", 2, RS_TAKE, "s", L1(DAY3), 1, 0, 0},
	{"a reset", 2, RS_RESET, "s", L1(DAY3), 0, 0, 0},
	{"gives the whole day back", 2, RS_TAKE, "s", L1(DAY3), 1, 1, 2},
	{"a year from first use", 2, RS_TAKE, "fy", L1(FIRST_YEAR), 1, 1, 0},
	{"spent for a year", 2, RS_TAKE, "fy", L1(FIRST_YEAR), 1, 0, 0},
	{"a reservation of a quota passes at once", 2, RS_RESERVE, "r",
	 L1(DAY3), 2, 1, 1},
	{"one that does not fit the day is refused", 2, RS_RESERVE, "r",
	 L1(DAY3), 2, 0, 1},
	{"and charged nothing", 2, RS_TAKE, "r", L1(DAY3), 1, 1, 0},
	{"a reservation of two quotas", 2, RS_RESERVE, "r2", L2(DAY3, MONTH5),
	 3, 1, 0},
	{"a reservation of a bucket and a quota: at once", 2, RS_RESERVE, "rm",
	 L2(BUCKET3, MONTH5), 2, 1, 1},
	{"the next waits for the bucket's token (20 min)", 2, RS_RESERVE, "rm",
	 L2(BUCKET3, MONTH5), 2, 1, 0},
	{"the quota was charged at once: 1 left", 2, RS_PEEK, "rm", L1(MONTH5),
	 1, 1, 0},
	{"a day's quota beside a bucket whose turn is too far: refused", 2,
	 RS_RESERVE, "rm", L2(BUCKET3, DAY3), 3, 0, 0},
	{"and the day charged nothing", 2, RS_TAKE, "rm", L1(DAY3), 3, 1, 0},
	{"a bucket drained", 2, RS_TAKE, "rk", L1(BUCKET3), 3, 1, 0},
	{"its next token reserved (20 min)", 2, RS_RESERVE, "rk", L1(BUCKET3),
	 1, 1, 0},
	{"a turn (40 min) past Kolkata's hour (30 min left): refused", 2,
	 RS_RESERVE, "rk", L2(BUCKET3, KOLKATA1), 1, 0, 0},
	{"the hour charged nothing", 2, RS_TAKE, "rk", L1(KOLKATA1), 1, 1, 0},
	{"a bucket used 2 of 3", 2, RS_TAKE, "cb", L1(BUCKET3), 2, 1, 1},
	{"carried to a day's quota", 2, V_CARRY, "cb", L2(DAY3, BUCKET3), 0, 0,
	 0},
	{"the quota counts 2", 2, RS_TAKE, "cb", L1(DAY3), 1, 1, 0},
	{"the bucket is gone (full)", 2, RS_TAKE, "cb", L1(BUCKET3), 1, 1, 2},
	{"a month used 2 of 5", 2, RS_TAKE, "cq", L1(MONTH5), 2, 1, 3},
	{"carried to a bucket", 2, V_CARRY, "cq", L2(BUCKET3, MONTH5), 0, 0, 0},
	{"the bucket is 2 short", 2, RS_TAKE, "cq", L1(BUCKET3), 1, 1, 0},
	{"the month is gone", 2, RS_TAKE, "cq", L1(MONTH5), 1, 1, 4},
	{"a day used 2 of 3", 2, RS_TAKE, "cqq", L1(DAY3), 2, 1, 1},
	{"carried to a month", 2, V_CARRY, "cqq", L2(MONTH5, DAY3), 0, 0, 0},
	{"the month counts 2", 2, RS_TAKE, "cqq", L1(MONTH5), 1, 1, 2},
	{"a live state is never overwritten by a carry", 2, V_CARRY, "cqq",
	 L2(MONTH5, BUCKET3), 0, 0, 0},
	{"the month still counts 3", 2, RS_TAKE, "cqq", L1(MONTH5), 2, 1, 0},
};

#define NROWS (sizeof(table) / sizeof(table[0]))

static void test_quota_table_same_answer_on_every_store(store_t *stores)
{
	size_t r, s;

	for (r = 0; r < NROWS; r++) {
		const row_t *row = &table[r];
		rs_result_t a[NSTORES];

		set_clock((T0 + row->at) * S_TO_US);
		for (s = 0; s < NSTORES; s++) {
			a[s] = call(&stores[s], row->verb, row->key, row->lims,
				    row->cost);
			if (a[s].status != 0 ||
			    ((row->verb == RS_TAKE || row->verb == RS_PEEK ||
			      row->verb == RS_RESERVE) &&
			     (a[s].allowed != row->allowed ||
			      a[s].d.remaining != row->remaining)))
				fprintf(stderr,
					"%s: row %zu (%s): status %d allowed "
					"%d remaining %llu, want 0 %d %llu\n",
					stores[s].name, r, row->what,
					a[s].status, a[s].allowed,
					(unsigned long long)a[s].d.remaining,
					row->allowed,
					(unsigned long long)row->remaining);
			CHECK(a[s].status == 0);
			if (row->verb != RS_TAKE && row->verb != RS_PEEK &&
			    row->verb != RS_RESERVE)
				continue;
			CHECK(a[s].allowed == row->allowed);
			CHECK(a[s].d.remaining == row->remaining);
			/* The memory store's answer, field by field (whole
			 * ms: Redis answers in ms). */
			if (a[s].d.limit != a[0].d.limit ||
			    a[s].d.which != a[0].d.which ||
			    a[s].d.never != a[0].d.never ||
			    ms_up(a[s].d.retry_after_us) !=
				    ms_up(a[0].d.retry_after_us) ||
			    ms_up(a[s].d.reset_after_us) !=
				    ms_up(a[0].d.reset_after_us))
				fprintf(stderr,
					"%s: row %zu (%s): limit %llu which "
					"%zu never %d retry %llu reset %llu; "
					"memory %llu %zu %d %llu %llu\n",
					stores[s].name, r, row->what,
					(unsigned long long)a[s].d.limit,
					(size_t)a[s].d.which, a[s].d.never,
					(unsigned long long)a[s]
						.d.retry_after_us,
					(unsigned long long)a[s]
						.d.reset_after_us,
					(unsigned long long)a[0].d.limit,
					(size_t)a[0].d.which, a[0].d.never,
					(unsigned long long)a[0]
						.d.retry_after_us,
					(unsigned long long)a[0]
						.d.reset_after_us);
			CHECK(a[s].d.limit == a[0].d.limit);
			CHECK(a[s].d.which == a[0].d.which);
			CHECK(a[s].d.never == a[0].d.never);
			CHECK(ms_up(a[s].d.retry_after_us) ==
			      ms_up(a[0].d.retry_after_us));
			CHECK(ms_up(a[s].d.reset_after_us) ==
			      ms_up(a[0].d.reset_after_us));
		}
	}
	/* What the table says of the boundaries, in numbers: the refusal
	 * at 23:59:59 waits one second; the first-use month ends on Feb 28
	 * at 23:59:58 (28 days after Jan 31 23:59:58). */
	set_clock((T0 + 1) * S_TO_US);
	{
		static const int day[] = L1(DAY3), fm[] = L1(FIRST_MONTH);
		rs_result_t a = call(&stores[2], RS_TAKE, "a2", day, 3);
		rs_result_t b = call(&stores[2], RS_TAKE, "a2", day, 1);
		rs_result_t f = call(&stores[2], RS_TAKE, "f2", fm, 1);

		CHECK(a.allowed && !b.allowed);
		CHECK(b.d.retry_after_us == S_TO_US);
		CHECK(f.allowed && f.d.reset_after_us == 28 * 86400 * S_TO_US);
	}
	printf("a table of quota sequences: the same answers on the memory, "
	       "shared, script and module stores\n");
}

/* ------------------------------------------------ random sequences */

/* Compares one call's answers on every store with the memory store's;
 * 0 when they differ (told on stderr). */
static int same_answers(store_t *stores, const rs_result_t *a, rs_verb_t v,
			size_t step)
{
	size_t s;
	int ok = 1;

	for (s = 0; s < NSTORES; s++) {
		int same = a[s].status == 0;

		if (v == RS_RESERVE)
			same = same &&
			       ms_up(a[s].wait_us) == ms_up(a[0].wait_us);
		if (v == RS_TAKE || v == RS_PEEK || v == RS_RESERVE)
			same = same && a[s].allowed == a[0].allowed &&
			       a[s].d.remaining == a[0].d.remaining &&
			       a[s].d.limit == a[0].d.limit &&
			       a[s].d.which == a[0].d.which &&
			       a[s].d.never == a[0].d.never &&
			       ms_up(a[s].d.retry_after_us) ==
				       ms_up(a[0].d.retry_after_us) &&
			       ms_up(a[s].d.reset_after_us) ==
				       ms_up(a[0].d.reset_after_us);
		if (!same) {
			fprintf(stderr,
				"step %zu verb %d: %s status %d allowed %d "
				"remaining %llu retry %llu reset %llu; memory "
				"%d %llu %llu %llu\n",
				step, (int)v, stores[s].name, a[s].status,
				a[s].allowed,
				(unsigned long long)a[s].d.remaining,
				(unsigned long long)a[s].d.retry_after_us,
				(unsigned long long)a[s].d.reset_after_us,
				a[0].allowed,
				(unsigned long long)a[0].d.remaining,
				(unsigned long long)a[0].d.retry_after_us,
				(unsigned long long)a[0].d.reset_after_us);
			ok = 0;
		}
	}
	return ok;
}

/*
 * Random sequences of every verb on random quotas (and a bucket beside
 * them), the clock stepping by random amounts -- a second, a minute, an
 * hour, a day, a week, a month, now and then back an hour -- across
 * midnights, months, DST changes in Berlin (the steps pass March and
 * October) and leap days: every store answers as the memory store does.
 */
static void test_random_sequences_same_answer_on_every_store(store_t *stores)
{
	static const int64_t steps[] = {0,     1,	  59,	      3600,
					86400, 7 * 86400, 31 * 86400, -3600};
	static const rs_verb_t verbs[] = {
		RS_TAKE,     RS_TAKE,  RS_TAKE, RS_PEEK,    RS_REFUND, RS_RESET,
		RS_PENALIZE, RS_BLOCK, RS_SET,	RS_RESERVE, V_CARRY};
	static const int quotas[] = {DAY3,  MONTH5,   BERLIN4, FIRST_MONTH,
				     WEEK3, KOLKATA1, YEAR10,  FIRST_YEAR};
	const size_t nq = sizeof(quotas) / sizeof(quotas[0]);
	uint64_t seed = 0x9e3779b97f4a7c15u;
	int64_t t = (T0 - 40 * 86400) * S_TO_US + 250000;
	size_t step, s, allowed = 0, refused = 0;
	int bad = 0;

	for (step = 0; step < 400 && !bad; step++) {
		rs_result_t a[NSTORES];
		int lims[4] = {-1, -1, -1, -1};
		rs_verb_t v;
		uint64_t cost;
		char key[16];

		seed = seed * 6364136223846793005u + 1442695040888963407u;
		t += steps[(seed >> 33) % 8] * S_TO_US;
		set_clock(t);
		v = verbs[(seed >> 40) % 11];
		snprintf(key, sizeof(key), "rnd%u", (unsigned)(seed >> 50) % 3);
		lims[0] = quotas[(seed >> 20) % nq];
		if (v == V_CARRY)
			lims[1] = (seed >> 12) % 4 == 0
					  ? BUCKET3
					  : quotas[(seed >> 14) % nq];
		else if ((seed >> 12) % 4 == 0)
			lims[1] = BUCKET3;
		if (lims[1] == lims[0])
			lims[1] = -1;
		cost = (seed >> 24) % 5;
		if (v == RS_BLOCK)
			cost *= 1000;
		for (s = 0; s < NSTORES; s++)
			a[s] = call(&stores[s], v, key, lims, cost);
		if (!same_answers(stores, a, v, step))
			bad = 1;
		if (v == RS_TAKE || v == RS_RESERVE)
			*(a[0].allowed ? &allowed : &refused) += 1;
	}
	CHECK(!bad);
	/* Both answers occur, or the sequence shows little. */
	CHECK(allowed > 20 && refused > 20);
	printf("%zu random calls at random instants (takes and reservations: "
	       "%zu allowed, %zu refused): the same answers on every store\n",
	       step, allowed, refused);
}

/* -------------------------------------------- script and module bytes */

/* The one key of pattern on c, into name (empty: none). */
static void key_named(redisContext *c, const char *pattern, char *name,
		      size_t n)
{
	redisReply *r = rh_cmd(c, "KEYS %s", pattern);

	CHECK(r->type == REDIS_REPLY_ARRAY && r->elements <= 1);
	name[0] = '\0';
	if (r->elements == 1)
		snprintf(name, n, "%s", r->element[0]->str);
	freeReplyObject(r);
}

/* The key on a and on b: the same bytes, the same expiry (ms). */
static void same_bytes(redisContext *a, redisContext *b, const char *key)
{
	redisReply *va = rh_cmd(a, "GET %s", key),
		   *vb = rh_cmd(b, "GET %s", key);
	redisReply *ea = rh_cmd(a, "PEXPIRETIME %s", key),
		   *eb = rh_cmd(b, "PEXPIRETIME %s", key);

	CHECK(va->type == REDIS_REPLY_STRING && vb->type == REDIS_REPLY_STRING);
	if (strcmp(va->str, vb->str) != 0 || ea->integer != eb->integer)
		fprintf(stderr, "%s: script %s (%lld), module %s (%lld)\n", key,
			va->str, ea->integer, vb->str, eb->integer);
	CHECK(strcmp(va->str, vb->str) == 0);
	CHECK(ea->integer == eb->integer && ea->integer > 0);
	freeReplyObject(va);
	freeReplyObject(vb);
	freeReplyObject(ea);
	freeReplyObject(eb);
}

/* A quota's rate as the module takes it: its id from the '@'. */
static const char *rate_of(const sluice_limit_t *l, char *id)
{
	sluice_limit_id(l, id);
	return strchr(id, '@');
}

/*
 * The script (through the store, whose every call on the server without
 * the module is quota.lua) and the module (SLUICE.TAKE itself) store the
 * same bytes with the same expiry, at instants that test the first-use
 * arithmetic: Jan 31 of a leap year, Feb 29, Dec 31.
 */
static void test_script_and_module_store_the_same_bytes(store_t *script,
							int sport, int mport)
{
	static const int64_t at[] = {
		INT64_C(1832925600), /* 2028-01-31 10:00:00 */
		INT64_C(1835431200), /* 2028-02-29 10:00:00 */
		INT64_C(1830295800), /* 2027-12-31 23:30:00 */
		T0,
	};
	static const int which[] = {DAY3,  MONTH5,   BERLIN4,	 FIRST_MONTH,
				    WEEK3, KOLKATA1, FIRST_YEAR, YEAR10};
	redisContext *a = rh_connect(sport), *b = rh_connect(mport);
	char key[64], name[256], id[SLUICE_LIMIT_ID_MAX];
	size_t i, j;

	for (i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		set_clock(at[i] * S_TO_US + 250000);
		for (j = 0; j < sizeof(which) / sizeof(which[0]); j++) {
			const int lims[] = {which[j], -1};
			const sluice_limit_t *l = &limits[which[j]];
			redisReply *r;
			int k;

			snprintf(key, sizeof(key), "bytes-%zu-%zu", i, j);
			for (k = 0; k < 2; k++)
				CHECK(call(script, RS_TAKE, key, lims, 1)
					      .status == 0);
			snprintf(name, sizeof(name), "*{%s}*", key);
			key_named(a, name, name, sizeof(name));
			CHECK(name[0]);
			for (k = 0; k < 2; k++) {
				r = rh_cmd(b, "SLUICE.TAKE %s %llu %s", name,
					   (unsigned long long)l->capacity,
					   rate_of(l, id));
				CHECK(r->type == REDIS_REPLY_ARRAY);
				freeReplyObject(r);
			}
			same_bytes(a, b, name);
		}
	}
	/* A carry of a bucket into a quota: quota.lua (the store's carry)
	 * and SLUICE.CARRY write the same bytes. */
	{
		static const int bucket[] = L1(BUCKET3),
				 carry[] = L2(FIRST_MONTH, BUCKET3);
		char qname[256], bname[256];
		redisReply *r;

		CHECK(call(script, RS_TAKE, "carry-b", bucket, 2).allowed);
		key_named(a, "*{carry-b}*", bname, sizeof(bname));
		CHECK(bname[0]);
		r = rh_cmd(b, "SLUICE.TAKE %s 3 3/h COST 2", bname);
		freeReplyObject(r);
		same_bytes(a, b, bname);
		CHECK(call(script, V_CARRY, "carry-b", carry, 0).status == 0);
		key_named(a, "*{carry-b}*", qname, sizeof(qname));
		CHECK(qname[0] && strcmp(qname, bname) != 0);
		r = rh_cmd(b, "SLUICE.CARRY %s 2 %s %s 3 3/h", qname,
			   rate_of(&limits[FIRST_MONTH], id), bname);
		CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 1);
		freeReplyObject(r);
		same_bytes(a, b, qname);
		r = rh_cmd(b, "EXISTS %s", bname);
		CHECK(r->integer == 0);
		freeReplyObject(r);
	}
	redisFree(a);
	redisFree(b);
	printf("the script and the module store the same bytes with the "
	       "same expiry (takes and a carry)\n");
}

/* -------------------------------------------------- a clock far off */

/* Counts the client's EV_REFUSED events that name the clock. */
static void on_clock_event(void *arg, const sluice_redis_event_t *ev)
{
	if (ev->kind == SLUICE_REDIS_EV_REFUSED && strstr(ev->detail, "clock"))
		++*(int *)arg;
}

/* A client whose clock is 40 days behind the server's cannot place a
 * month: refused (retry in 1 s), nothing written, however often it
 * asks; a UTC day is a fixed period the script places itself. */
static void test_client_clock_far_off_is_refused(store_t *script, int port)
{
	static const int month[] = L1(MONTH5), day[] = L1(DAY3),
			 both[] = L2(DAY3, MONTH5);
	redisContext *c = rh_connect(port);
	char name[128];
	int i;

	set_clock((T0 + 2) * S_TO_US);
	sluice_redis__quota_skew_us -= 40 * 86400 * S_TO_US;
	for (i = 0; i < 3; i++) {
		rs_result_t r = call(script, RS_TAKE, "skew", month, 1);

		CHECK(r.status == 0 && !r.allowed);
		CHECK(r.d.retry_after_us == S_TO_US);
	}
	key_named(c, "*{skew}*", name, sizeof(name));
	CHECK(name[0] == '\0');
	/* Mixed with a day the script can place: refused all the same,
	 * the day not charged. */
	CHECK(!call(script, RS_TAKE, "skew2", both, 1).allowed);
	key_named(c, "*{skew2}*", name, sizeof(name));
	CHECK(name[0] == '\0');
	CHECK(call(script, RS_TAKE, "skew3", day, 1).allowed);
	/* So is a zone's second (a second is UTC's in every zone). */
	{
		uint16_t zone;
		sluice_limit_t saved = limits[NLIMITS - 1];
		static const int last[] = L1(NLIMITS - 1);

		CHECK(sluice_zone_load("Europe/Berlin", &zone, NULL, 0) == 0);
		CHECK(sluice_quota_init(
			      &limits[NLIMITS - 1], 2, SLUICE_PER_SECOND,
			      SLUICE_ALIGN_CALENDAR, zone, NULL, 0) == 0);
		CHECK(call(script, RS_TAKE, "skew5", last, 2).allowed);
		CHECK(!call(script, RS_TAKE, "skew5", last, 1).allowed);
		limits[NLIMITS - 1] = saved;
	}
	/* The operator is told (an event naming the clock), at most once
	 * a second however many calls are refused. */
	{
		sluice_redis_opts_t o = {0};
		sluice_redis_t *r;
		uv_loop_t loop;
		int told = 0;
		char url[64], err[256];

		snprintf(url, sizeof(url), "redis://127.0.0.1:%d", port);
		o.url = url;
		o.timeout_ms = 5000;
		o.on_event = on_clock_event;
		o.event_arg = &told;
		uv_loop_init(&loop);
		CHECK(sluice_redis_open(&r, &loop, &o, err, sizeof(err)) == 0);
		for (i = 0; i < 5; i++) {
			result_t t = rh_take(&loop, r, "skew4", &limits[MONTH5],
					     1, 1);

			CHECK(t.status == 0 && !t.allowed);
		}
		CHECK(told >= 1 && told <= 5);
		rh_close_client(&loop, r);
		uv_loop_close(&loop);
	}
	/* Ahead by 70 days (the windows sent: March to May): refused
	 * too. */
	sluice_redis__quota_skew_us += 110 * 86400 * S_TO_US;
	CHECK(!call(script, RS_TAKE, "skew", month, 1).allowed);
	/* Off by less than a window (20 days): the server's clock picks. */
	sluice_redis__quota_skew_us -= 90 * 86400 * S_TO_US;
	CHECK(call(script, RS_TAKE, "skew", month, 1).allowed);
	redisFree(c);
	set_clock((T0 + 2) * S_TO_US);
	printf("a client clock far off: refused, never allowed\n");
}

/* ------------------------------------------ today's bucket format */

/* A bucket written by script.lua (a call of buckets alone) is read by
 * quota.lua as it stands, and back. */
static void test_bucket_in_todays_format_is_read(store_t *s)
{
	static const int bucket[] = L1(BUCKET3), mixed[] = L2(BUCKET3, MONTH5);
	rs_result_t r;

	set_clock((T0 + 2) * S_TO_US);
	CHECK(call(s, RS_TAKE, "bf", bucket, 2).d.remaining == 1);
	r = call(s, RS_TAKE, "bf", mixed, 1);
	CHECK(r.allowed && r.d.remaining == 0 && r.d.which == 0);
	r = call(s, RS_TAKE, "bf", mixed, 1);
	CHECK(!r.allowed && r.d.which == 0);
	r = call(s, RS_PEEK, "bf", bucket, 1);
	CHECK(!r.allowed && r.d.remaining == 0);
	r = call(s, RS_PEEK, "bf", mixed + 1, 1);
	CHECK(r.allowed && r.d.remaining == 3); /* 5 - 1 used - 1 peeked */
	printf("a bucket in today's format is read beside a quota\n");
}

/* ------------------------------------------------ the module's args */

static void module_refuses(redisContext *c, const char *cap, const char *rate,
			   const char *needle)
{
	redisReply *r = redisCommand(c, "SLUICE.TAKE badargs %s %s", cap, rate);

	CHECK(r && r->type == REDIS_REPLY_ERROR);
	if (!strstr(r->str, needle))
		fprintf(stderr, "SLUICE.TAKE %s %s: %s (want \"%s\")\n", cap,
			rate, r->str, needle);
	CHECK(strstr(r->str, needle) != NULL);
	freeReplyObject(r);
}

static void test_module_refuses_bad_quota_args(int port)
{
	redisContext *c = rh_connect(port);
	redisReply *r;

	module_refuses(c, "10", "@fortnight", "fortnight");
	module_refuses(c, "10", "@", "unit");
	module_refuses(c, "10", "@day:Mars/Olympus_Mons", "Mars/Olympus_Mons");
	module_refuses(c, "10", "@day:../../etc/passwd", "..");
	module_refuses(c, "0", "@day", "quota");
	module_refuses(c, "1000000000", "@day", "quota");
	module_refuses(c, "ten", "@day", "quota");
	module_refuses(c, "-1", "@month", "quota");
	r = rh_cmd(c, "EXISTS badargs");
	CHECK(r->integer == 0);
	freeReplyObject(r);
	/* The largest quota is fine, and TAKEMULTI takes quotas too. */
	r = rh_cmd(c, "SLUICE.TAKE goodargs 999999999 @day:Europe/Berlin");
	CHECK(r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == 1 &&
	      r->element[2]->integer == 999999998);
	freeReplyObject(r);
	r = rh_cmd(c, "SLUICE.TAKEMULTI 2 g1 g2 5 @month 3 1/s");
	CHECK(r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == 1);
	freeReplyObject(r);
	/* The batch verbs: two takes of one 1-a-day quota on one key, the
	 * second refused; a quota and a bucket side by side. */
	r = rh_cmd(c, "SLUICE.TAKEEACH 1 @day 1 e1 e1");
	CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
	CHECK(r->element[0]->element[0]->integer == 1 &&
	      r->element[1]->element[0]->integer == 0);
	freeReplyObject(r);
	r = rh_cmd(c, "SLUICE.TAKEMANY m1 2 @week:first_use 2 m2 3 1/s 1");
	CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 2);
	CHECK(r->element[0]->element[0]->integer == 1 &&
	      r->element[0]->element[2]->integer == 0 &&
	      r->element[1]->element[0]->integer == 1);
	freeReplyObject(r);
	module_refuses(c, "10", "@day:first_use:x", "first_use:x");
	redisFree(c);
	printf("the module refuses bad quota arguments with clear errors\n");
}

/* ------------------------------------------------- memory per key */

static void print_memory_usage(int port, const char *pattern, const char *path)
{
	redisContext *c = rh_connect(port);
	char name[256];
	redisReply *r;

	key_named(c, pattern, name, sizeof(name));
	CHECK(name[0]);
	r = rh_cmd(c, "MEMORY USAGE %s", name);
	CHECK(r->type == REDIS_REPLY_INTEGER && r->integer > 0);
	printf("MEMORY USAGE of a quota's key (%s, %zu bytes of name, %s): "
	       "%lld bytes\n",
	       name, strlen(name), path, r->integer);
	freeReplyObject(r);
	redisFree(c);
}

int main(void)
{
	static char file_env[96];
	static const char *frozen_env[] = {
		"LD_PRELOAD=" SLUICE_FROZEN_CLOCK_PATH, file_env, NULL};
	rs_four_t f;
	store_t *stores = f.stores;

	signal(SIGPIPE, SIG_IGN);
	snprintf(clock_path, sizeof(clock_path), "/tmp/sluice-quota-clock-%d",
		 (int)getpid());
	snprintf(file_env, sizeof(file_env), "FROZEN_CLOCK_FILE=%s",
		 clock_path);
	limits_init();
	set_clock(T0 * S_TO_US);
	memset(&f, 0, sizeof(f));
	f.with.env = frozen_env;
	f.without.env = frozen_env;

	rs_four_open(&f, SLUICE_MODULE_PATH, "quota");

	test_quota_table_same_answer_on_every_store(stores);
	/* The module's store took its one-key takes on the module. */
	{
		redisContext *c = rh_connect(f.with.port);

		CHECK(rs_calls(c, "sluice.take") > 0);
		redisFree(c);
	}
	print_memory_usage(f.without.port, "*{a}:3@day", "script");
	print_memory_usage(f.with.port, "*{a}:3@day", "module");
	test_random_sequences_same_answer_on_every_store(stores);
	test_script_and_module_store_the_same_bytes(&stores[2], f.without.port,
						    f.with.port);
	test_client_clock_far_off_is_refused(&stores[2], f.without.port);
	test_bucket_in_todays_format_is_read(&stores[2]);
	test_bucket_in_todays_format_is_read(&stores[3]);
	test_module_refuses_bad_quota_args(f.with.port);

	rs_four_close(&f);
	unlink(clock_path);
	printf("ok\n");
	return 0;
}
