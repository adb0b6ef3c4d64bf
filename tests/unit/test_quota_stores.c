/*
 * test_quota_stores.c -- calendar quotas on the memory and the shared
 * memory store: one table of takes, peeks, refunds, sets, blocks,
 * penalties, reservations, resets and carries, at frozen instants around
 * day, hour and month ends and Berlin's change to summer time, run on
 * both stores and on the pure functions (one state per key and limit):
 * the three must answer alike, step by step, and the takes as the table
 * says.  Then a shared file used by two processes that numbered their
 * zones differently: a quota is named by its zone's name, so both count
 * in one bucket, and never in another zone's.
 */
#include "check.h"
#include "sluice.h"
#include "stores.h"

#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S    INT64_C(1000000)
#define NLIM 4

static int64_t at(int y, int m, int d, int hh, int mm, int ss)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = m - 1;
	tm.tm_mday = d;
	tm.tm_hour = hh;
	tm.tm_min = mm;
	tm.tm_sec = ss;
	return (int64_t)timegm(&tm) * S;
}

static sluice_limit_t L[NLIM];

/* 0: 3 a day (UTC); 1: 2 an hour (Berlin); 2: a bucket of 5, 5/min;
 * 3: 4 a month from first use. */
static void make_limits(void)
{
	uint16_t berlin;

	CHECK(sluice_zone_load("Europe/Berlin", &berlin, NULL, 0) == 0);
	CHECK(sluice_quota_init(&L[0], 3, SLUICE_PER_DAY, 0, 0, NULL, 0) == 0);
	CHECK(sluice_quota_init(&L[1], 2, SLUICE_PER_HOUR, 0, berlin, NULL,
				0) == 0);
	L[2] = lim(5, "5/min");
	CHECK(sluice_quota_init(&L[3], 4, SLUICE_PER_MONTH,
				SLUICE_ALIGN_FIRST_USE, 0, NULL, 0) == 0);
}

typedef struct step_s {
	char op;	 /* T take, P peek, R refund, S set, B block (ms), N
			    penalize, V reserve, X reset, C carry */
	const char *key; /* "a" or "b" */
	unsigned mask;	 /* which limits (bits of L); C: the `from` ones */
	int64_t t;
	uint64_t amount; /* cost, remaining, ms; C: the target's index */
	int allowed;	 /* T, V, C: the answer the table expects; -1: any */
} step_t;

/* Berlin goes to summer time at 2026-03-29 01:00 UTC (02:00 -> 03:00). */
#define DAY0		INT64_C(1774656000) /* 2026-03-28 00:00:00 UTC */
#define HMS(d, h, m, s) ((DAY0 + (d)*86400 + (h)*3600 + (m)*60 + (s)) * S)
#define D0(h, m, s)	HMS(0, h, m, s)
#define D1(h, m, s)	HMS(1, h, m, s)
#define A28(h, m, s)	HMS(31, h, m, s) /* 2026-04-28 */
#define A29(h, m, s)	HMS(32, h, m, s)

static const step_t steps[] = {
	{'T', "a", 1, D0(22, 0, 0), 1, 1},
	{'T', "a", 3, D0(22, 10, 0), 1, 1},
	{'T', "a", 3, D0(22, 20, 0), 1, 1},
	{'T', "a", 2, D0(22, 30, 0), 1, 0}, /* Berlin's 23:00 hour spent */
	{'P', "a", 1, D0(22, 30, 0), 1, -1},
	{'T', "a", 2, D0(23, 0, 0), 2, 1},  /* midnight in Berlin */
	{'T', "a", 7, D0(23, 30, 0), 1, 0}, /* day spent: nothing charged */
	{'R', "a", 7, D0(23, 31, 0), 1, -1},
	{'T', "a", 5, D0(23, 32, 0), 1, 1},
	{'T', "a", 1, D1(0, 0, 0), 3, 1},   /* a new UTC day */
	{'T', "a", 2, D1(0, 30, 0), 2, 1},  /* Berlin 01:30 */
	{'T', "a", 2, D1(0, 59, 59), 1, 0}, /* Berlin 01:59:59 */
	{'T', "a", 2, D1(1, 0, 0), 2, 1},   /* 03:00 summer time */
	{'S', "a", 3, D1(1, 5, 0), 1, -1},
	{'T', "a", 2, D1(1, 6, 0), 1, 1},
	{'T', "a", 2, D1(1, 7, 0), 1, 0},
	{'B', "a", 5, D1(1, 8, 0), 1000, -1},
	{'T', "a", 1, D1(1, 8, 0), 1, 0}, /* the day is spent */
	{'T', "a", 4, D1(1, 8, 0), 1, 0}, /* the bucket blocked a second */
	{'T', "a", 4, D1(1, 8, 1), 1, 1},
	{'N', "a", 2, D1(2, 0, 0), 5, -1},
	{'T', "a", 2, D1(2, 59, 59), 0, 0}, /* in debt: even a peek-take */
	{'T', "a", 2, D1(3, 0, 0), 2, 1},
	{'T', "b", 8, D0(10, 0, 0), 3, 1}, /* first use: until Apr 28 */
	{'T', "b", 8, A28(9, 59, 59), 1, 1},
	{'T', "b", 8, A28(9, 59, 59), 1, 0},
	{'T', "b", 8, A28(10, 0, 0), 4, 1},
	{'V', "b", 12, A28(10, 0, 1), 1, 0}, /* spent */
	{'X', "b", 8, A28(10, 0, 2), 0, -1},
	{'V', "b", 12, A28(10, 0, 3), 1, 1},
	{'V', "b", 12, A28(10, 0, 3), 1, 1},
	{'T', "b", 1, A28(23, 0, 0), 3, 1},
	/* Carry b's day quota (3 used) into its bucket (full), then back
	 * (amount: the target's index; mask: where from). */
	{'C', "b", 1, A28(23, 0, 1), 2, 1},
	{'T', "b", 4, A28(23, 0, 1), 3, 0},
	{'T', "b", 4, A28(23, 0, 1), 2, 1},
	{'C', "b", 4, A28(23, 0, 2), 0, 1},
	{'T', "b", 1, A28(23, 0, 3), 1, 0},
	{'T', "b", 1, A29(0, 0, 0), 3, 1},
};

/* The pure functions over one state per key and limit. */
typedef struct model_s {
	sluice_state_t st[2][NLIM];
} model_t;

typedef struct answer_s {
	int rc;
	uint64_t wait;
	sluice_decision_t sum;
} answer_t;

static size_t pick(unsigned mask, sluice_limit_t *out, size_t *idx)
{
	size_t n = 0, i;

	for (i = 0; i < NLIM; i++)
		if (mask & (1u << i)) {
			idx[n] = i;
			out[n++] = L[i];
		}
	return n;
}

static answer_t model_step(model_t *m, const step_t *s)
{
	sluice_limit_t ls[NLIM];
	sluice_state_t cur[NLIM], next[NLIM];
	sluice_decision_t ds[NLIM];
	size_t idx[NLIM], n = pick(s->mask, ls, idx), i;
	sluice_state_t *st = m->st[s->key[0] - 'a'];
	answer_t a;

	memset(&a, 0, sizeof(a));
	for (i = 0; i < n; i++)
		cur[i] = st[idx[i]];
	switch (s->op) {
	case 'T':
	case 'P':
		a.rc = sluice_eval_all(ls, cur, n, s->t, s->amount, next, ds,
				       &a.sum);
		if (s->op == 'T')
			for (i = 0; i < n; i++)
				st[idx[i]] = next[i];
		break;
	case 'V':
		a.rc = sluice_reserve_all(ls, cur, n, s->t, s->amount,
					  UINT64_MAX, next, &a.sum, &a.wait);
		for (i = 0; i < n; i++)
			st[idx[i]] = next[i];
		break;
	case 'C': {
		/* As the stores carry: into a target holding no live state,
		 * from the first limit that does; every `from` forgotten. */
		size_t to = (size_t)s->amount;

		a.rc = 0;
		if (sluice_state_expiry_us(st[to]) <= s->t)
			for (i = 0; i < n && !a.rc; i++) {
				if (sluice_state_expiry_us(st[idx[i]]) <= s->t)
					continue;
				st[to] = sluice_carry(&ls[i], st[idx[i]],
						      &L[to], s->t);
				a.rc = st[to] != 0;
			}
		for (i = 0; i < n; i++)
			st[idx[i]] = 0;
		break;
	}
	default:
		for (i = 0; i < n; i++) {
			sluice_state_t *p = &st[idx[i]];

			if (s->op == 'R')
				*p = sluice_refund(&ls[i], *p, s->t, s->amount);
			else if (s->op == 'S')
				*p = sluice_set_remaining(&ls[i], s->t,
							  s->amount);
			else if (s->op == 'B')
				*p = sluice_block(&ls[i], *p, s->t, s->amount);
			else if (s->op == 'N')
				*p = sluice_penalize(&ls[i], *p, s->t,
						     s->amount);
			else
				*p = 0;
		}
		a.rc = 0;
	}
	return a;
}

/* One step on a store: mem or shm (the other NULL). */
static answer_t store_step(sluice_memstore_t *mem, sluice_shmstore_t *shm,
			   const step_t *s)
{
	sluice_limit_t ls[NLIM];
	size_t idx[NLIM], n = pick(s->mask, ls, idx);
	answer_t a;

	memset(&a, 0, sizeof(a));
#define CALL(verb, ...)                                                        \
	(mem ? sluice_memstore_##verb(mem, __VA_ARGS__)                        \
	     : sluice_shmstore_##verb(shm, __VA_ARGS__))
	switch (s->op) {
	case 'T':
		a.rc = CALL(take, s->key, 1, ls, n, s->amount, s->t, NULL,
			    &a.sum);
		break;
	case 'P':
		a.rc = CALL(peek, s->key, 1, ls, n, s->amount, s->t, NULL,
			    &a.sum);
		break;
	case 'R':
		a.rc = CALL(refund, s->key, 1, ls, n, s->amount, s->t);
		break;
	case 'S':
		a.rc = CALL(set, s->key, 1, ls, n, s->amount, s->t);
		break;
	case 'B':
		a.rc = CALL(block, s->key, 1, ls, n, s->amount, s->t);
		break;
	case 'N':
		a.rc = CALL(penalize, s->key, 1, ls, n, s->amount, s->t);
		break;
	case 'V':
		a.rc = CALL(reserve, s->key, 1, ls, n, s->amount, UINT64_MAX,
			    s->t, &a.sum, &a.wait);
		break;
	case 'X':
		a.rc = CALL(reset, s->key, 1, ls, n);
		break;
	default:
		a.rc = CALL(carry, s->key, 1, &L[s->amount], ls, n, s->t);
	}
#undef CALL
	return a;
}

static int same_answer(const answer_t *x, const answer_t *y, char op)
{
	if (x->rc != y->rc)
		return 0;
	if (op == 'T' || op == 'P' || op == 'V')
		return same_decision(&x->sum, &y->sum) &&
		       (op != 'V' || x->wait == y->wait);
	return 1;
}

static void test_one_table_on_every_store(void)
{
	char path[128];
	sluice_memstore_t *mem = open_memstore(256);
	sluice_shmstore_t *shm = NULL;
	model_t model;
	size_t i;
	char err[200];

	CHECK(D0(0, 0, 0) == at(2026, 3, 28, 0, 0, 0));
	CHECK(A28(10, 0, 0) == at(2026, 4, 28, 10, 0, 0));
	make_limits();
	snprintf(path, sizeof(path), "/dev/shm/sluice-test-%d-quota",
		 (int)getpid());
	unlink(path);
	CHECK(mem != NULL);
	CHECK(sluice_shmstore_open(&shm, path, 256, err, sizeof(err)) == 0);
	memset(&model, 0, sizeof(model));
	for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		const step_t *s = &steps[i];
		answer_t want = model_step(&model, s);
		answer_t m = store_step(mem, NULL, s);
		answer_t h = store_step(NULL, shm, s);

		if (!same_answer(&want, &m, s->op) ||
		    !same_answer(&want, &h, s->op) ||
		    (s->allowed >= 0 && want.rc != s->allowed))
			fprintf(stderr,
				"step %zu %c: model %d (rem %llu retry %llu) "
				"memory %d (rem %llu) shared %d (rem %llu), "
				"table %d\n",
				i, s->op, want.rc,
				(unsigned long long)want.sum.remaining,
				(unsigned long long)want.sum.retry_after_us,
				m.rc, (unsigned long long)m.sum.remaining, h.rc,
				(unsigned long long)h.sum.remaining,
				s->allowed);
		CHECK(same_answer(&want, &m, s->op));
		CHECK(same_answer(&want, &h, s->op));
		if (s->allowed >= 0)
			CHECK(want.rc == s->allowed);
	}
	CHECK(sluice_shmstore_check(shm, err, sizeof(err)) == 0);
	sluice_shmstore_close(shm);
	sluice_memstore_free(mem);
	unlink(path);
}

/* A quota's count expires at its window's end: the store forgets it
 * (reclaim) once the window is over. */
static void test_counts_expire_at_window_end(void)
{
	sluice_memstore_t *mem = open_memstore(64);
	sluice_memstore_stats_t st;
	sluice_decision_t d;
	char key[8];
	int i;

	make_limits();
	CHECK(mem != NULL);
	for (i = 0; i < 20; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		CHECK(sluice_memstore_take(mem, key, strlen(key), &L[0], 1, 1,
					   D0(12, 0, 0), NULL, &d) == 1);
	}
	sluice_memstore_stats(mem, &st);
	CHECK(st.keys == 20);
	/* Still counted at the day's last second... */
	for (i = 0; i < 200; i++)
		sluice_memstore_take(mem, "x", 1, &L[2], 1, 0, D0(23, 59, 59),
				     NULL, &d);
	sluice_memstore_stats(mem, &st);
	CHECK(st.keys >= 20);
	/* ... and reclaimed once it is over. */
	for (i = 0; i < 400; i++)
		sluice_memstore_take(mem, "x", 1, &L[2], 1, 0, D1(0, 0, 1),
				     NULL, &d);
	sluice_memstore_stats(mem, &st);
	CHECK(st.keys <= 1);
	CHECK(st.expired >= 20);
	sluice_memstore_free(mem);
}

/* Takes over several keys, all or nothing, with quotas: one key's
 * spent quota refuses the whole take and charges no other key; takes
 * each on its own decide so.  On both stores. */
static void test_take_many_with_quotas(void)
{
	char path[128];
	sluice_memstore_t *mem = open_memstore(64);
	sluice_shmstore_t *shm = NULL;
	int k;

	make_limits();
	snprintf(path, sizeof(path), "/dev/shm/sluice-test-%d-many",
		 (int)getpid());
	unlink(path);
	CHECK(mem != NULL);
	CHECK(sluice_shmstore_open(&shm, path, 64, NULL, 0) == 0);
	for (k = 0; k < 2; k++) {
		sluice_take_item_t it[2];
		sluice_decision_t d;
		int i;

#define MANY(items, n, t)                                                      \
	(k == 0 ? sluice_memstore_take_many(mem, items, n, t)                  \
		: sluice_shmstore_take_many(shm, items, n, t))
#define PEEK(key, l, cost, t)                                                  \
	(k == 0 ? sluice_memstore_peek(mem, key, 1, l, 1, cost, t, NULL, &d)   \
		: sluice_shmstore_peek(shm, key, 1, l, 1, cost, t, NULL, &d))
		memset(it, 0, sizeof(it));
		it[0].key = "p";
		it[1].key = "q";
		for (i = 0; i < 2; i++) {
			it[i].keylen = 1;
			it[i].limits = &L[0]; /* 3 a day */
			it[i].nlimits = 1;
			it[i].cost = 2;
		}
		CHECK(MANY(it, 2, D0(9, 0, 0)) == 1);
		it[0].cost = 1;
		it[1].cost = 2; /* q has 1 left: refuses, p not charged */
		CHECK(MANY(it, 2, D0(9, 0, 1)) == 0);
		CHECK(it[0].allowed == 1 && it[1].allowed == 0);
		CHECK(PEEK("p", &L[0], 0, D0(9, 0, 2)) == 1 &&
		      d.remaining == 1);
		/* Each on its own (take_each; the shared store has none:
		 * single takes): p passes, q is refused. */
		if (k == 0)
			CHECK(sluice_memstore_take_each(mem, it, 2,
							D0(9, 0, 3)) == 1);
		else
			CHECK(sluice_shmstore_take(shm, "p", 1, &L[0], 1, 1,
						   D0(9, 0, 3), NULL,
						   &d) == 1 &&
			      sluice_shmstore_take(shm, "q", 1, &L[0], 1, 2,
						   D0(9, 0, 3), NULL, &d) == 0);
		CHECK(PEEK("p", &L[0], 0, D0(9, 0, 4)) == 1 &&
		      d.remaining == 0);
		CHECK(PEEK("q", &L[0], 0, D0(9, 0, 4)) == 1 &&
		      d.remaining == 1);
		/* Tomorrow both are fresh. */
		CHECK(MANY(it, 2, D1(0, 0, 0)) == 1);
#undef MANY
#undef PEEK
	}
	sluice_shmstore_close(shm);
	sluice_memstore_free(mem);
	unlink(path);
}

/*
 * Two processes on one shared file, their zones numbered differently (the
 * child loads Asia/Kolkata first, the parent Europe/Berlin): the child
 * spends the key's Berlin quota, the parent finds it spent and its own
 * Kolkata quota untouched.  Must run before this process loads a zone.
 */
static void test_shared_file_names_zones_not_ids(void)
{
	char path[128];
	sluice_shmstore_t *shm = NULL;
	sluice_limit_t berlin, kolkata;
	sluice_decision_t d;
	uint16_t id_b, id_k;
	pid_t pid;
	int status;

	snprintf(path, sizeof(path), "/dev/shm/sluice-test-%d-zones",
		 (int)getpid());
	unlink(path);
	CHECK(sluice_shmstore_open(&shm, path, 64, NULL, 0) == 0);
	sluice_shmstore_close(shm);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int ok =
			sluice_zone_load("Asia/Kolkata", &id_k, NULL, 0) == 0 &&
			sluice_zone_load("Europe/Berlin", &id_b, NULL, 0) ==
				0 &&
			sluice_quota_init(&berlin, 2, SLUICE_PER_DAY, 0, id_b,
					  NULL, 0) == 0 &&
			sluice_shmstore_open(&shm, path, 64, NULL, 0) == 0 &&
			sluice_shmstore_take(shm, "k", 1, &berlin, 1, 2,
					     D0(12, 0, 0), NULL, &d) == 1;

		_exit(ok ? 0 : 1);
	}
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0);
	CHECK(sluice_zone_load("Europe/Berlin", &id_b, NULL, 0) == 0);
	CHECK(sluice_zone_load("Asia/Kolkata", &id_k, NULL, 0) == 0);
	CHECK(id_b < id_k); /* the child numbered them the other way */
	CHECK(sluice_quota_init(&berlin, 2, SLUICE_PER_DAY, 0, id_b, NULL, 0) ==
	      0);
	CHECK(sluice_quota_init(&kolkata, 2, SLUICE_PER_DAY, 0, id_k, NULL,
				0) == 0);
	CHECK(sluice_shmstore_open(&shm, path, 64, NULL, 0) == 0);
	CHECK(sluice_shmstore_take(shm, "k", 1, &berlin, 1, 1, D0(12, 0, 1),
				   NULL, &d) == 0);
	CHECK(d.remaining == 0);
	CHECK(sluice_shmstore_take(shm, "k", 1, &kolkata, 1, 2, D0(12, 0, 1),
				   NULL, &d) == 1);
	sluice_shmstore_close(shm);
	unlink(path);
}

int main(void)
{
	RUN(test_shared_file_names_zones_not_ids); /* first: no zone yet */
	RUN(test_one_table_on_every_store);
	RUN(test_counts_expire_at_window_end);
	RUN(test_take_many_with_quotas);
	TESTS_DONE();
}
