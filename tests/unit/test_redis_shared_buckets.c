/*
 * test_redis_shared_buckets.c -- a take whose items share a key or a
 * bucket gets the same answer on every store, and is never a store
 * failure; and so does a sequence of reservations (a turn to wait for),
 * refunds and sets.
 *
 * A request may carry the same Envoy descriptor twice, a descriptor with
 * its own `limit` beside one the config matches (the same key, another
 * limit), or match two rules that build the same key; a `/v1/take`-style
 * call or a Node Limiter may list the same limit twice.  The verdict
 * engine sends such a request as one take whose items share buckets.  The
 * memory store decides each item on the state the one before it left
 * (sluice_memstore_take_many()): the same request must be answered so by
 * the shared-memory store, by the Redis store's script path and by a
 * Redis store on a server with the module -- each opened through the one
 * store interface (sluice_backend_open(), every take through be.ops), run
 * through one table of takes, and compared item by item with the memory
 * store's answers (and with the numbers the table states).
 *
 * The limits are per hour, so the moments between calls refill nothing a
 * whole token would show.
 *
 * Needs SLUICE_MODULE_PATH (the built sluice-redis.so), set by CMake.
 */
#include "sluice.h"

#include "redis_stores.h"
#include "stores.h"

#include <unistd.h>
#include <uv.h>

#ifndef SLUICE_MODULE_PATH
#error "SLUICE_MODULE_PATH must name the built sluice-redis.so"
#endif

#define MAX_ITEMS 4
#define NSTORES	  4

/* The limits the table's items name, by index. */
static sluice_limit_t limits[4];

static void limits_init(void)
{
	rs_limit(&limits[0], "5", "5/h");   /* the descriptor's limit */
	rs_limit(&limits[1], "3", "3/h");   /* a request-supplied one */
	rs_limit(&limits[2], "100", "1/h"); /* a wide one */
	rs_limit(&limits[3], "4", "4/h");
}

/* One item of a take: its key, its limits (indices into limits[], -1
 * ends) and its cost. */
typedef struct row_item_s {
	const char *key;
	int lim[4];
	uint64_t cost;
} row_item_t;

/* One take of the table and what it must answer: allowed, and each
 * item's remaining count. */
typedef struct row_s {
	const char *what;
	row_item_t items[MAX_ITEMS];
	int allowed;
	uint64_t remaining[MAX_ITEMS];
} row_t;

/* In order: each row runs on the state the rows before it left. */
static const row_t table[] = {
	{"the same descriptor twice: both charged, the second after the first",
	 {{"d", {0, -1}, 1}, {"d", {0, -1}, 1}},
	 1,
	 {4, 3}},
	{"again: two more tokens",
	 {{"d", {0, -1}, 1}, {"d", {0, -1}, 1}},
	 1,
	 {2, 1}},
	{"one token left, two asked: refused, nothing charged",
	 {{"d", {0, -1}, 1}, {"d", {0, -1}, 1}},
	 0,
	 {0, 0}},
	{"the token the refused take left is still there",
	 {{"d", {0, -1}, 1}},
	 1,
	 {0}},
	{"the same key with a request-supplied limit: another bucket",
	 {{"o", {0, -1}, 1}, {"o", {1, -1}, 1}},
	 1,
	 {4, 2}},
	{"a limit shared by items with other limits: charged for each",
	 {{"m", {2, 3, -1}, 1}, {"m", {3, -1}, 2}, {"x", {3, -1}, 1}},
	 1,
	 {3, 1, 3}},
	{"the shared limit has one token: the next item over it refuses all",
	 {{"m", {2, 3, -1}, 1}, {"x", {3, -1}, 1}, {"m", {3, -1}, 1}},
	 0,
	 {0, 2, 0}},
	{"a limit twice in one item is one bucket, charged once",
	 {{"t", {3, 3, -1}, 1}, {"t", {3, -1}, 1}},
	 1,
	 {3, 2}},
	{"alone, a limit twice is one bucket (the module's one-key path)",
	 {{"t", {3, 3, -1}, 1}},
	 1,
	 {1}},
	{"three items whose costs together pass the capacity: refused",
	 {{"c", {3, -1}, 2}, {"c", {3, -1}, 2}, {"c", {3, -1}, 1}},
	 0,
	 {2, 0, 0}},
	{"and the bucket is untouched", {{"c", {3, -1}, 4}}, 1, {0}},
	{"a huge cost beside a small one on the same bucket: refused",
	 {{"h", {0, -1}, 1}, {"h", {0, -1}, UINT64_MAX}},
	 0,
	 {4, 4}},
	{"nothing was charged by it", {{"h", {0, -1}, 5}}, 1, {0}},
};

#define NROWS (sizeof(table) / sizeof(table[0]))

/* What one store answered for one row. */
typedef struct answer_s {
	int status, allowed;
	sluice_decision_t d[MAX_ITEMS];
	int item_allowed[MAX_ITEMS];
} answer_t;

typedef rs_store_t store_t; /* redis_stores.h's four */

static void on_done(void *arg, int status, int allowed)
{
	rs_result_t *res = arg;

	CHECK(!res->done);
	res->done = 1;
	res->status = status;
	res->allowed = allowed;
}

static answer_t run_row(store_t *s, const row_t *row)
{
	sluice_limit_t ls[MAX_ITEMS][4];
	sluice_take_item_t it[MAX_ITEMS];
	rs_result_t res = {0};
	answer_t a;
	size_t n, j;

	memset(&a, 0, sizeof(a));
	memset(it, 0, sizeof(it));
	for (n = 0; n < MAX_ITEMS && row->items[n].key; n++) {
		const row_item_t *ri = &row->items[n];

		for (j = 0; j < 4 && ri->lim[j] >= 0; j++)
			ls[n][j] = limits[ri->lim[j]];
		it[n].key = ri->key;
		it[n].keylen = strlen(ri->key);
		it[n].limits = ls[n];
		it[n].nlimits = j;
		it[n].cost = ri->cost;
	}
	CHECK(s->be.ops->take(s->be.impl, it, n, sluice_now_us(), on_done,
			      &res) == 0);
	if (s->loop)
		rs_wait(s->loop, &res);
	CHECK(res.done);
	a.status = res.status;
	a.allowed = res.allowed;
	for (j = 0; j < n; j++) {
		a.d[j] = it[j].summary;
		a.item_allowed[j] = it[j].allowed;
	}
	return a;
}

static void test_shared_buckets_same_answer_on_every_store(store_t *stores,
							   size_t nstores)
{
	size_t r, s, j;

	limits_init();
	for (r = 0; r < NROWS; r++) {
		const row_t *row = &table[r];
		answer_t mem = run_row(&stores[0], row);

		for (s = 0; s < nstores; s++) {
			answer_t a = s ? run_row(&stores[s], row) : mem;

			/* Never a store failure, on any store. */
			if (a.status != 0 || a.allowed != row->allowed)
				fprintf(stderr,
					"%s: row %zu (%s): status %d "
					"allowed %d, want 0 and %d\n",
					stores[s].name, r, row->what, a.status,
					a.allowed, row->allowed);
			CHECK(a.status == 0);
			CHECK(a.allowed == row->allowed);
			for (j = 0; j < MAX_ITEMS && row->items[j].key; j++) {
				if (a.d[j].remaining != row->remaining[j])
					fprintf(stderr,
						"%s: row %zu (%s): item %zu "
						"remaining %llu, want %llu\n",
						stores[s].name, r, row->what, j,
						(unsigned long long)a.d[j]
							.remaining,
						(unsigned long long)
							row->remaining[j]);
				CHECK(a.d[j].remaining == row->remaining[j]);
				/* The memory store's answer, item by item. */
				CHECK(a.item_allowed[j] == mem.item_allowed[j]);
				CHECK(a.d[j].allowed == mem.d[j].allowed);
				CHECK(a.d[j].limit == mem.d[j].limit);
				CHECK(a.d[j].which == mem.d[j].which);
				CHECK(a.d[j].never == mem.d[j].never);
			}
		}
	}
}

/* ------------------------------------------------------- reservations */

/* One call of the reservation table: a reservation (max_wait in seconds)
 * or a set (cost: the tokens to leave), and what it must answer. */
typedef struct reserve_row_s {
	const char *what;
	rs_verb_t verb;
	uint64_t cost, max_wait_s;
	int reserved;
	uint64_t wait_s; /* the turn, in whole seconds from now */
} reserve_row_t;

/* On "w" under 2 tokens at 1/h, in order. */
static const reserve_row_t reserve_table[] = {
	{"a full bucket: the first two now", RS_RESERVE, 1, 0, 1, 0},
	{"", RS_RESERVE, 1, 0, 1, 0},
	{"the third waits an hour", RS_RESERVE, 1, 3600, 1, 3600},
	{"the fourth would wait two: refused past its max_wait", RS_RESERVE, 1,
	 3600, 0, 7200},
	{"nothing was charged by it: two hours with room for them", RS_RESERVE,
	 1, 7200, 1, 7200},
	{"a cost beyond the capacity never", RS_RESERVE, 3, 86400, 0, 0},
	{"an aborted wait gives its token back (refund)", RS_REFUND, 1, 0, 0,
	 0},
	{"and the next one gets that turn", RS_RESERVE, 2, 10800, 1, 10800},
	{"set leaves one token", RS_SET, 1, 0, 0, 0},
	{"which a reservation takes at once", RS_RESERVE, 1, 0, 1, 0},
	{"then an hour's wait again", RS_RESERVE, 1, 0, 0, 3600},
};

/* The same reservations get the same answers on every store: reserved
 * or refused alike, each turn where the table says (the moments between
 * calls shorten a wait by less than a minute). */
static void test_reservations_same_answer_on_every_store(store_t *stores,
							 size_t nstores)
{
	const size_t n = sizeof(reserve_table) / sizeof(reserve_table[0]);
	sluice_limit_t l;
	size_t r, s;

	rs_limit(&l, "2", "1/h");
	for (s = 0; s < nstores; s++) {
		for (r = 0; r < n; r++) {
			const reserve_row_t *row = &reserve_table[r];
			rs_result_t a = rs_call(
				&stores[s].be, stores[s].loop, row->verb, "w",
				&l, 1, row->cost, row->max_wait_s * 1000);

			CHECK(a.status == 0);
			if (row->verb != RS_RESERVE)
				continue;
			if (a.allowed != row->reserved)
				fprintf(stderr,
					"%s: row %zu (%s): reserved %d\n",
					stores[s].name, r, row->what,
					a.allowed);
			CHECK(a.allowed == row->reserved);
			if (row->cost > 2) {
				CHECK(a.wait_us == UINT64_MAX && a.d.never);
				continue;
			}
			CHECK(a.wait_us <= row->wait_s * 1000000);
			CHECK(a.wait_us + 60000000 > row->wait_s * 1000000);
			CHECK(a.now_us > 0);
		}
	}
}

int main(void)
{
	rs_four_t f;
	store_t *stores = f.stores;

	signal(SIGPIPE, SIG_IGN);
	memset(&f, 0, sizeof(f));

	rs_four_open(&f, SLUICE_MODULE_PATH, "shared-buckets");

	test_shared_buckets_same_answer_on_every_store(stores, NSTORES);
	test_reservations_same_answer_on_every_store(stores, NSTORES);

	rs_four_close(&f);
	printf("ok\n");
	return 0;
}
