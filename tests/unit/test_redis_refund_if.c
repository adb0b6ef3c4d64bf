/*
 * test_redis_refund_if.c -- a cancelled reservation is given back only
 * while nothing was decided after it (the conditional refund,
 * sluice_refund_if()), alike on every store: memory, shared memory, the
 * Redis store's script path (refund_if.lua) and a Redis server with the
 * module (SLUICE.REFUNDIF).  Each is opened through the one store
 * interface and runs one table of reservations, takes and conditional
 * refunds; every answer is the table's on every store.
 *
 * How a client would get around the limit: by aborting a reservation
 * after a later one was given its turn.  An unconditional refund would
 * open a gap one refill before that later turn and the next reservation
 * would take it (two requests on one turn).  The table shows that gap
 * stays closed (a reservation is refused where it would have fit), and
 * that a reservation nobody followed is given back whole.
 *
 * The limits are per hour, so the moments between calls refill nothing a
 * whole token would show.  Needs SLUICE_MODULE_PATH (the built
 * sluice-redis.so), set by CMake.
 */
#include "sluice.h"

#include "redis_stores.h"
#include "stores.h"

#include <unistd.h>
#include <uv.h>

#ifndef SLUICE_MODULE_PATH
#error "SLUICE_MODULE_PATH must name the built sluice-redis.so"
#endif

#define NSTORES 4

typedef rs_store_t store_t; /* redis_stores.h's four */

/* The limits a row names, by index: 2 and 3 tokens an hour, and a
 * calendar quota of 2 a day (UTC). */
static sluice_limit_t limits[3];

enum { RESERVE, REFUND_IF, TAKE, PENALIZE, PEEK };

/* One call and what it answers: reserve (max_wait in seconds: reserved,
 * and the turn in whole seconds from now), refund_if of the states row
 * `from` left (refunded or not), a take, a penalty or a peek (allowed;
 * a peek's remaining in wait_s). */
typedef struct row_s {
	const char *what;
	int verb;
	const char *key;
	int lim[3]; /* indices into limits[], -1 ends */
	uint64_t cost, max_wait_s;
	int from; /* REFUND_IF: the row whose reservation is given back */
	int allowed;
	uint64_t wait_s;
} row_t;

/* In order: each row runs on the state the rows before it left. */
static const row_t table[] = {
	/* 0 */ {"a full bucket of 2: the first now",
		 RESERVE,
		 "a",
		 {0, -1},
		 1,
		 0,
		 0,
		 1,
		 0},
	/* 1 */ {"the second now", RESERVE, "a", {0, -1}, 1, 0, 0, 1, 0},
	/* 2 */
	{"the third in an hour", RESERVE, "a", {0, -1}, 1, 3600, 0, 1, 3600},
	/* 3 */
	{"the fourth in two", RESERVE, "a", {0, -1}, 1, 7200, 0, 1, 7200},
	/* 4 */
	{"the third aborts after the fourth got its turn: nothing back",
	 REFUND_IF,
	 "a",
	 {0, -1},
	 1,
	 0,
	 2,
	 0,
	 0},
	/* 5 */
	{"so no fifth fits in two hours (the limit holds)",
	 RESERVE,
	 "a",
	 {0, -1},
	 1,
	 7200,
	 0,
	 0,
	 10800},
	/* 6 */
	{"the fourth aborts, last in line: given back",
	 REFUND_IF,
	 "a",
	 {0, -1},
	 1,
	 0,
	 3,
	 1,
	 0},
	/* 7 */
	{"its turn goes to the next",
	 RESERVE,
	 "a",
	 {0, -1},
	 1,
	 7200,
	 0,
	 1,
	 7200},
	/* 8 */
	{"a refused take after it changes nothing",
	 TAKE,
	 "a",
	 {0, -1},
	 1,
	 0,
	 0,
	 0,
	 0},
	/* 9 */
	{"so that one can still be given back",
	 REFUND_IF,
	 "a",
	 {0, -1},
	 1,
	 0,
	 7,
	 1,
	 0},
	/* 10 */
	{"and once more the turn in two hours",
	 RESERVE,
	 "a",
	 {0, -1},
	 1,
	 7200,
	 0,
	 1,
	 7200},
	/* 11 */ {"a penalty after it", PENALIZE, "a", {0, -1}, 1, 0, 0, 1, 0},
	/* 12 */
	{"moved the state: nothing back",
	 REFUND_IF,
	 "a",
	 {0, -1},
	 1,
	 0,
	 10,
	 0,
	 0},
	/* 13 */
	{"two limits of one key reserved together",
	 RESERVE,
	 "m",
	 {0, 1, -1},
	 1,
	 0,
	 0,
	 1,
	 0},
	/* 14 */
	{"another rule charges one of them alone",
	 TAKE,
	 "m",
	 {1, -1},
	 1,
	 0,
	 0,
	 1,
	 0},
	/* 15 */
	{"one bucket moved on: nothing back on either",
	 REFUND_IF,
	 "m",
	 {0, 1, -1},
	 1,
	 0,
	 13,
	 0,
	 0},
	/* 16 */
	{"reserved together again", RESERVE, "m", {0, 1, -1}, 1, 0, 0, 1, 0},
	/* 17 */
	{"nobody after it: both given back",
	 REFUND_IF,
	 "m",
	 {0, 1, -1},
	 1,
	 0,
	 16,
	 1,
	 0},
	/* 18 */
	{"a token on each again, as before row 16 (the take after "
	 "it would leave none)",
	 PEEK,
	 "m",
	 {0, 1, -1},
	 1,
	 0,
	 0,
	 1,
	 0},
	/* 19 */
	{"a reservation of cost 0 charges nothing",
	 RESERVE,
	 "z",
	 {0, -1},
	 0,
	 0,
	 0,
	 1,
	 0},
	/* 20 */
	{"and has nothing to give back",
	 REFUND_IF,
	 "z",
	 {0, -1},
	 0,
	 0,
	 19,
	 0,
	 0},
	/* 21 */
	{"a refused reservation left no state to give back",
	 REFUND_IF,
	 "a",
	 {0, -1},
	 1,
	 0,
	 5,
	 0,
	 0},
	/* 22 */
	{"a quota of 2 a day: reserved now",
	 RESERVE,
	 "q",
	 {2, -1},
	 1,
	 0,
	 0,
	 1,
	 0},
	/* 23 */
	{"nobody after it: given back",
	 REFUND_IF,
	 "q",
	 {2, -1},
	 1,
	 0,
	 22,
	 1,
	 0},
	/* 24 */ {"reserved again", RESERVE, "q", {2, -1}, 1, 0, 0, 1, 0},
	/* 25 */ {"a take after it", TAKE, "q", {2, -1}, 1, 0, 0, 1, 0},
	/* 26 */
	{"the count moved on: nothing back",
	 REFUND_IF,
	 "q",
	 {2, -1},
	 1,
	 0,
	 24,
	 0,
	 0},
	/* 27 */
	{"so the day's quota is spent (the limit holds)",
	 TAKE,
	 "q",
	 {2, -1},
	 1,
	 0,
	 0,
	 0,
	 0},
	/* 28 */
	{"a bucket and a quota reserved together",
	 RESERVE,
	 "mq",
	 {0, 2, -1},
	 1,
	 0,
	 0,
	 1,
	 0},
	/* 29 */
	{"nobody after it: given back on both",
	 REFUND_IF,
	 "mq",
	 {0, 2, -1},
	 1,
	 0,
	 28,
	 1,
	 0},
	/* 30 */ {"so two takes pass", TAKE, "mq", {0, 2, -1}, 1, 0, 0, 1, 0},
	/* 31 */ {"(the second)", TAKE, "mq", {0, 2, -1}, 1, 0, 0, 1, 0},
	/* 32 */
	{"and a third does not", TAKE, "mq", {0, 2, -1}, 1, 0, 0, 0, 0},
};

#define NROWS (sizeof(table) / sizeof(table[0]))

static size_t row_limits(const row_t *row, sluice_limit_t *l)
{
	size_t n = 0;

	while (n < 3 && row->lim[n] >= 0) {
		l[n] = limits[row->lim[n]];
		n++;
	}
	return n;
}

static void run_table(store_t *st)
{
	rs_result_t got[NROWS];
	sluice_limit_t l[3];
	size_t r, n;

	for (r = 0; r < NROWS; r++) {
		const row_t *row = &table[r];
		rs_result_t a;

		n = row_limits(row, l);
		switch (row->verb) {
		case RESERVE:
			a = rs_call(&st->be, st->loop, RS_RESERVE, row->key, l,
				    n, row->cost, row->max_wait_s * 1000);
			break;
		case REFUND_IF:
			a = rs_refund_if(&st->be, st->loop, row->key, l, n,
					 row->cost, got[row->from].states);
			break;
		case TAKE:
			a = rs_call(&st->be, st->loop, RS_TAKE, row->key, l, n,
				    row->cost, 0);
			break;
		case PENALIZE:
			a = rs_call(&st->be, st->loop, RS_PENALIZE, row->key, l,
				    n, row->cost, 0);
			a.allowed = a.status == 0;
			break;
		default:
			a = rs_call(&st->be, st->loop, RS_PEEK, row->key, l, n,
				    row->cost, 0);
			break;
		}
		got[r] = a;
		if (a.status != 0 || a.allowed != row->allowed)
			fprintf(stderr, "%s: row %zu (%s): status %d, %d\n",
				st->name, r, row->what, a.status, a.allowed);
		CHECK(a.status == 0);
		CHECK(a.allowed == row->allowed);
		if (row->verb == PEEK)
			CHECK(a.d.remaining == row->wait_s);
		if (row->verb != RESERVE)
			continue;
		/* The moments between calls shorten a wait by < 60 s. */
		CHECK(a.wait_us <= row->wait_s * 1000000);
		CHECK(a.wait_us + 60000000 > row->wait_s * 1000000);
		/* A charge leaves a state to expect; nothing else does. */
		CHECK((a.states[0] != 0) == (a.allowed && row->cost > 0));
		CHECK(n < 2 || (a.states[1] != 0) == (a.states[0] != 0));
	}
}

int main(void)
{
	rs_four_t f;
	store_t *stores = f.stores;
	size_t s;

	signal(SIGPIPE, SIG_IGN);
	rs_limit(&limits[0], "2", "1/h");
	rs_limit(&limits[1], "3", "3/h");
	CHECK(sluice_quota_init(&limits[2], 2, SLUICE_PER_DAY,
				SLUICE_ALIGN_CALENDAR, 0, NULL, 0) == 0);
	memset(&f, 0, sizeof(f));

	rs_four_open(&f, SLUICE_MODULE_PATH, "refund-if");

	for (s = 0; s < NSTORES; s++)
		run_table(&stores[s]);
	/* The module answered the one-limit rows itself (REFUNDIF and
	 * RESERVE), not the scripts. */
	{
		redisContext *c = rh_connect(f.with.port);

		CHECK(rs_calls(c, "sluice.refundif") >= 5);
		CHECK(rs_calls(c, "sluice.reserve") >= 8);
		redisFree(c);
	}

	rs_four_close(&f);
	printf("ok\n");
	return 0;
}
