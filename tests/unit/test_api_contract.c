/*
 * test_api_contract.c -- the public headers' promises, function by
 * function: each documented failure (a NULL, a zero, a malformed argument)
 * gets the documented code, with a message where the function takes an
 * error buffer; the constructors share one shape (0 with *out set, or a
 * negative code with *out NULL and a message); decisions answer 1 or 0,
 * predicates 1 or 0, text functions their length.  No Redis server is
 * needed: the Redis client's checks happen before anything is sent.
 */
#include "check.h"
#include "sluice.h"
#include "sluice_redis.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define T0 INT64_C(1700000000000000)

static sluice_limit_t lim(const char *cap, const char *rate)
{
	sluice_limit_t l;

	CHECK(sluice_limit_parse(&l, cap, rate, NULL, 0) == 0);
	return l;
}

/* err holds a message containing want (a failure said in words). */
static void said(const char *err, const char *want)
{
	if (!err[0] || !strstr(err, want)) {
		fprintf(stderr, "message \"%s\" lacks \"%s\"\n", err, want);
		CHECK(0);
	}
}

/* ------------------------------------------------------------ errors */

static void test_strerror_names_every_code(void)
{
	int codes[] = {SLUICE_OK,     SLUICE_EINVAL, SLUICE_ERANGE,
		       SLUICE_ENOMEM, SLUICE_ESTORE, SLUICE_ETIMEDOUT};
	size_t i;

	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		CHECK(sluice_strerror(codes[i]) != NULL);
		CHECK(strcmp(sluice_strerror(codes[i]), "unknown error") != 0);
	}
	/* Every code is negative, and distinct. */
	for (i = 1; i < sizeof(codes) / sizeof(codes[0]); i++) {
		CHECK(codes[i] < 0);
		CHECK(strcmp(sluice_strerror(codes[i]),
			     sluice_strerror(codes[i - 1])) != 0);
	}
	CHECK(strcmp(sluice_strerror(-99), "unknown error") == 0);
	CHECK(strcmp(sluice_strerror(1), "unknown error") == 0);
}

/* ----------------------------------------------------- rates, limits */

static void test_rate_parse_failures(void)
{
	sluice_rate_t r;
	char err[256];

	err[0] = '\0';
	CHECK(sluice_rate_parse(NULL, &r, err, sizeof(err)) == SLUICE_EINVAL);
	said(err, "rate");
	err[0] = '\0';
	CHECK(sluice_rate_parse("", &r, err, sizeof(err)) == SLUICE_EINVAL);
	said(err, "2/s");
	err[0] = '\0';
	CHECK(sluice_rate_parse("2/fortnight", &r, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	CHECK(err[0] != '\0');
	err[0] = '\0';
	CHECK(sluice_rate_parse("-2/s", &r, err, sizeof(err)) == SLUICE_ERANGE);
	CHECK(err[0] != '\0');
	/* err may be NULL, and a short buffer is cut, NUL-terminated. */
	CHECK(sluice_rate_parse("nope", &r, NULL, 0) == SLUICE_EINVAL);
	memset(err, 'x', sizeof(err));
	CHECK(sluice_rate_parse("nope", &r, err, 8) == SLUICE_EINVAL);
	CHECK(strlen(err) == 7);
	CHECK(sluice_rate_parse("2/s", &r, err, sizeof(err)) == SLUICE_OK);
}

static void test_rate_format_returns_length(void)
{
	sluice_rate_t r;
	char buf[64];

	CHECK(sluice_rate_parse("50/min", &r, NULL, 0) == 0);
	CHECK(sluice_rate_format(&r, buf, sizeof(buf)) == (int)strlen(buf));
	CHECK(strcmp(buf, "50/min") == 0);
	/* As snprintf: the length it would have written. */
	CHECK(sluice_rate_format(&r, buf, 3) == 6);
	CHECK(strcmp(buf, "50") == 0);
}

static void test_limit_init_and_parse_failures(void)
{
	sluice_rate_t r = {500000, 1}, zero = {0, 1}, wide = {1, 1001};
	sluice_limit_t l;
	char err[256];

	err[0] = '\0';
	CHECK(sluice_limit_init(&l, 0, &r, err, sizeof(err)) == SLUICE_ERANGE);
	said(err, "capacity");
	err[0] = '\0';
	CHECK(sluice_limit_init(&l, 1, &zero, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "rate");
	CHECK(sluice_limit_init(&l, 1, &wide, NULL, 0) == SLUICE_EINVAL);
	err[0] = '\0';
	CHECK(sluice_limit_init(&l, SLUICE_UNITS_MAX, &r, err, sizeof(err)) ==
	      SLUICE_ERANGE);
	said(err, "too large");
	CHECK(sluice_limit_init(&l, 10, &r, NULL, 0) == SLUICE_OK);

	err[0] = '\0';
	CHECK(sluice_limit_parse(&l, NULL, "2/s", err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "capacity");
	err[0] = '\0';
	CHECK(sluice_limit_parse(&l, "-3", "2/s", err, sizeof(err)) ==
	      SLUICE_ERANGE);
	said(err, "negative");
	err[0] = '\0';
	CHECK(sluice_limit_parse(&l, "0", "2/s", err, sizeof(err)) ==
	      SLUICE_ERANGE);
	CHECK(err[0] != '\0');
	err[0] = '\0';
	CHECK(sluice_limit_parse(&l, "10", NULL, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "rate");
	CHECK(sluice_limit_parse(&l, "10", "2/s", NULL, 0) == SLUICE_OK);
}

static void test_limit_predicates_answer_one_or_zero(void)
{
	sluice_limit_t a = lim("10", "2/s"), b = lim("10", "120/min"),
		       c = lim("11", "2/s"), zero;
	char id[SLUICE_LIMIT_ID_MAX];

	memset(&zero, 0, sizeof(zero));
	CHECK(sluice_limit_valid(&a) == 1);
	CHECK(sluice_limit_valid(&zero) == 0);
	CHECK(sluice_limit_same(&a, &b) == 1);
	CHECK(sluice_limit_same(&a, &c) == 0);
	CHECK(sluice_limit_id(&a, id) == strlen(id));
	CHECK(strcmp(id, "10@2/s") == 0);
}

/* --------------------------------------------------------- decisions */

static void test_decisions_answer_one_or_zero(void)
{
	sluice_limit_t l[2] = {lim("1", "1/h"), lim("5", "1/s")};
	sluice_state_t st[2] = {0, 0}, next[2];
	sluice_decision_t d[2], sum, a, b;

	sluice_eval(&l[0], 0, T0, 1, &next[0], &d[0]);
	CHECK(d[0].allowed == 1);
	sluice_eval(&l[0], next[0], T0, 1, &next[1], &d[1]);
	CHECK(d[1].allowed == 0);

	CHECK(sluice_eval_all(l, st, 2, T0, 1, next, d, &sum) == 1);
	CHECK(sluice_eval_all(l, next, 2, T0, 1, st, d, NULL) == 0);
	CHECK(sum.which == 0); /* the 1-token limit is the tightest */

	a = d[1];
	b = d[0];
	a.allowed = 1;
	b.allowed = 0;
	CHECK(sluice_decision_merge(&a, &b) == 1);
	CHECK(sluice_decision_merge(&a, &b) == 0);
}

static void test_pure_bucket_functions_return_values(void)
{
	sluice_limit_t l = lim("10", "1/s");
	sluice_state_t s, next;
	sluice_decision_t d;

	CHECK(sluice_state_expiry_us(0) == 0);
	sluice_eval(&l, 0, T0, 10, &s, &d);
	CHECK(d.allowed == 1);
	CHECK(sluice_state_expiry_us(s) > T0);
	/* A refund never goes beyond full: 0. */
	CHECK(sluice_refund(&l, s, T0, 100) == 0);
	next = sluice_penalize(&l, s, T0, 5);
	CHECK(next > s);
	CHECK(sluice_block(&l, 0, T0, 1000) > 0);
	CHECK(sluice_debt_max_units(&l) >= l.tau);
	CHECK(sluice_now_us() > T0);
}

static void test_key_make_returns_length(void)
{
	const char *id = "alice";
	const void *parts[1] = {id};
	size_t lens[1] = {5};
	char out[SLUICE_KEY_MAX];

	CHECK(sluice_key_make("api", parts, lens, 1, out) == strlen(out));
	CHECK(memcmp(out,
		     "api\x1f"
		     "alice",
		     9) == 0);
}

/* ------------------------------------------------------ memory store */

static void test_memstore_open_shape(void)
{
	sluice_memstore_t *m = (sluice_memstore_t *)&m;
	sluice_memstore_stats_t st;
	char err[256];

	err[0] = '\0';
	CHECK(sluice_memstore_open(NULL, 10, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "out");
	err[0] = '\0';
	CHECK(sluice_memstore_open(&m, 0, err, sizeof(err)) == SLUICE_ERANGE);
	CHECK(m == NULL);
	said(err, "max_keys");
	CHECK(sluice_memstore_open(&m, 0, NULL, 0) == SLUICE_ERANGE);
	CHECK(sluice_memstore_open(&m, 10, NULL, 0) == 0);
	CHECK(m != NULL);
	sluice_memstore_stats(m, &st);
	CHECK(st.max_keys == 10);
	CHECK(st.recovered == 0); /* the shared store's alone */
	sluice_memstore_free(m);
	sluice_memstore_free(NULL);
}

/* The local stores' calls, through one table so that the memory and the
 * shared-memory store are held to the same promises. */
typedef struct local_s {
	void *s;
	int (*take)(void *, const void *, size_t, const sluice_limit_t *,
		    size_t, uint64_t, int64_t, sluice_decision_t *,
		    sluice_decision_t *);
	int (*peek)(void *, const void *, size_t, const sluice_limit_t *,
		    size_t, uint64_t, int64_t, sluice_decision_t *,
		    sluice_decision_t *);
	int (*take_many)(void *, sluice_take_item_t *, size_t, int64_t);
	int (*reset)(void *, const void *, size_t, const sluice_limit_t *,
		     size_t);
	int (*refund)(void *, const void *, size_t, const sluice_limit_t *,
		      size_t, uint64_t, int64_t);
	int (*penalize)(void *, const void *, size_t, const sluice_limit_t *,
			size_t, uint64_t, int64_t);
	int (*block)(void *, const void *, size_t, const sluice_limit_t *,
		     size_t, uint64_t, int64_t);
} local_t;

/* Wrappers that give a store's calls the table's types. */
#define LOCAL_WRAPPERS(prefix, T)                                              \
	static int prefix##_take_w(                                            \
		void *s, const void *k, size_t kl, const sluice_limit_t *l,    \
		size_t n, uint64_t c, int64_t t, sluice_decision_t *d,         \
		sluice_decision_t *sum)                                        \
	{                                                                      \
		return prefix##_take((T *)s, k, kl, l, n, c, t, d, sum);       \
	}                                                                      \
	static int prefix##_peek_w(                                            \
		void *s, const void *k, size_t kl, const sluice_limit_t *l,    \
		size_t n, uint64_t c, int64_t t, sluice_decision_t *d,         \
		sluice_decision_t *sum)                                        \
	{                                                                      \
		return prefix##_peek((T *)s, k, kl, l, n, c, t, d, sum);       \
	}                                                                      \
	static int prefix##_take_many_w(void *s, sluice_take_item_t *it,       \
					size_t n, int64_t t)                   \
	{                                                                      \
		return prefix##_take_many((T *)s, it, n, t);                   \
	}                                                                      \
	static int prefix##_reset_w(void *s, const void *k, size_t kl,         \
				    const sluice_limit_t *l, size_t n)         \
	{                                                                      \
		return prefix##_reset((T *)s, k, kl, l, n);                    \
	}                                                                      \
	static int prefix##_refund_w(void *s, const void *k, size_t kl,        \
				     const sluice_limit_t *l, size_t n,        \
				     uint64_t c, int64_t t)                    \
	{                                                                      \
		return prefix##_refund((T *)s, k, kl, l, n, c, t);             \
	}                                                                      \
	static int prefix##_penalize_w(void *s, const void *k, size_t kl,      \
				       const sluice_limit_t *l, size_t n,      \
				       uint64_t c, int64_t t)                  \
	{                                                                      \
		return prefix##_penalize((T *)s, k, kl, l, n, c, t);           \
	}                                                                      \
	static int prefix##_block_w(void *s, const void *k, size_t kl,         \
				    const sluice_limit_t *l, size_t n,         \
				    uint64_t ms, int64_t t)                    \
	{                                                                      \
		return prefix##_block((T *)s, k, kl, l, n, ms, t);             \
	}

LOCAL_WRAPPERS(sluice_memstore, sluice_memstore_t)
LOCAL_WRAPPERS(sluice_shmstore, sluice_shmstore_t)

#define LOCAL(prefix, store)                                                   \
	{                                                                      \
		(store), prefix##_take_w, prefix##_peek_w,                     \
			prefix##_take_many_w, prefix##_reset_w,                \
			prefix##_refund_w, prefix##_penalize_w,                \
			prefix##_block_w                                       \
	}

/* sluice_quota.h: the documented failures with their codes and a
 * message naming what was wrong; the functions that cannot fail return
 * their value. */
static void test_quota_calls_keep_the_header(void)
{
	sluice_limit_t q, b = lim("5", "1/s");
	char err[256];
	uint16_t id = 7;
	uint8_t per = 9;

	err[0] = '\0';
	CHECK(sluice_zone_load("../etc/passwd", &id, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "../etc/passwd");
	CHECK(id == 7);
	CHECK(sluice_zone_load("No/Such_Zone", &id, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "No/Such_Zone");
	CHECK(sluice_zone_load(NULL, &id, NULL, 0) == SLUICE_EINVAL);
	CHECK(sluice_zone_load("UTC", &id, NULL, 0) == 0 && id == 0);
	CHECK(strcmp(sluice_zone_name(0), "UTC") == 0);
	CHECK(sluice_zone_name(4000) != NULL);
	CHECK(sluice_per_parse("fortnight", &per, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "fortnight");
	CHECK(sluice_per_parse("weeks", &per, NULL, 0) == 0 &&
	      per == SLUICE_PER_WEEK);
	CHECK(sluice_per_name(42) != NULL && sluice_per_name(42)[0] == '\0');
	CHECK(sluice_quota_init(&q, 0, SLUICE_PER_DAY, 0, 0, err,
				sizeof(err)) == SLUICE_ERANGE);
	said(err, "quota");
	CHECK(sluice_quota_init(&q, 3, 0, 0, 0, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "unit");
	CHECK(sluice_quota_init(&q, 3, SLUICE_PER_DAY, 9, 0, err,
				sizeof(err)) == SLUICE_EINVAL);
	said(err, "alignment");
	CHECK(sluice_quota_init(&q, 3, SLUICE_PER_DAY, 0, 999, err,
				sizeof(err)) == SLUICE_EINVAL);
	said(err, "zone");
	CHECK(sluice_quota_init(&q, 3, SLUICE_PER_DAY, 0, 0, NULL, 0) == 0);
	CHECK(sluice_limit_valid(&q) == 1 && sluice_limit_is_quota(&q) == 1);
	CHECK(sluice_limit_same(&q, &b) == 0);
	/* A token bucket has no window: 0 for its end and start. */
	{
		int64_t start = 5;

		CHECK(sluice_quota_window(&b, 0, T0, &start) == 0 &&
		      start == 0);
		start = 5;
		CHECK(sluice_quota_calendar(&b, T0, &start) == 0 && start == 0);
		CHECK(sluice_quota_window(&q, 0, T0, NULL) > T0);
		CHECK(sluice_quota_calendar(&q, T0, &start) > T0 &&
		      start <= T0);
	}
	CHECK(sluice_quota_used(0, T0, NULL) == 0);
	CHECK(sluice_quota_state(T0, 0) == 0);
}

/* Every malformed call that the header names gets SLUICE_EINVAL, for
 * every verb; well-formed ones answer 1/0 (decisions) or 0. */
static void check_local(const local_t *o)
{
	sluice_limit_t one = lim("1", "1/h"), bad, many[SLUICE_MAX_LIMITS + 1];
	sluice_take_item_t it[2];
	sluice_decision_t d[1], sum;
	size_t i;

	memset(&bad, 0, sizeof(bad));
	for (i = 0; i <= SLUICE_MAX_LIMITS; i++)
		many[i] = one;

	/* nlimits 0, above SLUICE_MAX_LIMITS, an invalid limit, a NULL key
	 * with a length: every verb refuses. */
	CHECK(o->take(o->s, "k", 1, &one, 0, 1, T0, NULL, NULL) ==
	      SLUICE_EINVAL);
	CHECK(o->take(o->s, "k", 1, many, SLUICE_MAX_LIMITS + 1, 1, T0, NULL,
		      NULL) == SLUICE_EINVAL);
	CHECK(o->take(o->s, "k", 1, &bad, 1, 1, T0, NULL, NULL) ==
	      SLUICE_EINVAL);
	CHECK(o->take(o->s, NULL, 1, &one, 1, 1, T0, NULL, NULL) ==
	      SLUICE_EINVAL);
	CHECK(o->peek(o->s, "k", 1, &one, 0, 1, T0, NULL, NULL) ==
	      SLUICE_EINVAL);
	CHECK(o->peek(o->s, "k", 1, &bad, 1, 1, T0, NULL, NULL) ==
	      SLUICE_EINVAL);
	CHECK(o->reset(o->s, "k", 1, &one, 0) == SLUICE_EINVAL);
	CHECK(o->reset(o->s, "k", 1, &bad, 1) == SLUICE_EINVAL);
	CHECK(o->reset(o->s, NULL, 1, &one, 1) == SLUICE_EINVAL);
	CHECK(o->refund(o->s, "k", 1, &one, 0, 1, T0) == SLUICE_EINVAL);
	CHECK(o->refund(o->s, "k", 1, &bad, 1, 1, T0) == SLUICE_EINVAL);
	CHECK(o->penalize(o->s, "k", 1, many, SLUICE_MAX_LIMITS + 1, 1, T0) ==
	      SLUICE_EINVAL);
	CHECK(o->penalize(o->s, "k", 1, &bad, 1, 1, T0) == SLUICE_EINVAL);
	CHECK(o->block(o->s, "k", 1, &one, 0, 1000, T0) == SLUICE_EINVAL);
	CHECK(o->block(o->s, "k", 1, &bad, 1, 1000, T0) == SLUICE_EINVAL);

	memset(it, 0, sizeof(it));
	it[0].key = "a";
	it[0].keylen = 1;
	it[0].limits = &one;
	it[0].nlimits = 1;
	it[0].cost = 1;
	it[1] = it[0];
	it[1].key = "b";
	it[1].limits = &bad;
	CHECK(o->take_many(o->s, it, 2, T0) == SLUICE_EINVAL);
	it[1].limits = &one;
	it[1].nlimits = 0;
	CHECK(o->take_many(o->s, it, 2, T0) == SLUICE_EINVAL);
	it[1].nlimits = 1;

	/* Decisions: 1 allowed, 0 rejected; decisions and summary may be
	 * NULL.  The other verbs: 0. */
	CHECK(o->peek(o->s, "k", 1, &one, 1, 1, T0, NULL, NULL) == 1);
	CHECK(o->take(o->s, "k", 1, &one, 1, 1, T0, NULL, NULL) == 1);
	CHECK(o->take(o->s, "k", 1, &one, 1, 1, T0, d, &sum) == 0);
	CHECK(d[0].allowed == 0 && sum.allowed == 0);
	CHECK(o->peek(o->s, "k", 1, &one, 1, 1, T0, d, NULL) == 0);
	CHECK(o->refund(o->s, "k", 1, &one, 1, 1, T0) == 0);
	CHECK(o->take(o->s, "k", 1, &one, 1, 1, T0, NULL, &sum) == 1);
	CHECK(o->reset(o->s, "k", 1, &one, 1) == 0);
	CHECK(o->penalize(o->s, "k", 1, &one, 1, 1, T0) == 0);
	CHECK(o->take(o->s, "k", 1, &one, 1, 1, T0, NULL, NULL) == 0);
	CHECK(o->reset(o->s, "k", 1, &one, 1) == 0);
	CHECK(o->block(o->s, "k", 1, &one, 1, 1000, T0) == 0);
	CHECK(o->take(o->s, "k", 1, &one, 1, 1, T0, NULL, NULL) == 0);
	/* A key of length 0 (NULL or not) is a key like any other. */
	CHECK(o->take(o->s, NULL, 0, &one, 1, 1, T0, NULL, NULL) == 1);

	CHECK(o->take_many(o->s, it, 2, T0) == 1);
	CHECK(it[0].allowed == 1 && it[1].allowed == 1);
	CHECK(o->take_many(o->s, it, 2, T0) == 0);
	CHECK(it[0].allowed == 0 && it[1].allowed == 0);
}

static void test_memstore_calls_keep_the_header(void)
{
	sluice_memstore_t *m;
	sluice_limit_t one = lim("1", "1/h"), bad;
	sluice_take_item_t it[3];
	local_t o;

	CHECK(sluice_memstore_open(&m, 1000, NULL, 0) == 0);
	o = (local_t)LOCAL(sluice_memstore, m);
	check_local(&o);

	/* take_each: how many were allowed, or SLUICE_EINVAL with nothing
	 * decided. */
	memset(&bad, 0, sizeof(bad));
	memset(it, 0, sizeof(it));
	it[0].key = "e1";
	it[0].keylen = 2;
	it[0].limits = &one;
	it[0].nlimits = 1;
	it[0].cost = 1;
	it[1] = it[0];
	it[1].key = "e2";
	it[2] = it[0];
	it[2].limits = &bad;
	CHECK(sluice_memstore_take_each(m, it, 3, T0) == SLUICE_EINVAL);
	CHECK(sluice_memstore_peek(m, "e1", 2, &one, 1, 1, T0, NULL, NULL) ==
	      1);
	it[2] = it[0];
	CHECK(sluice_memstore_take_each(m, it, 3, T0) == 2);
	CHECK(it[0].allowed == 1 && it[1].allowed == 1 && it[2].allowed == 0);
	CHECK(sluice_memstore_take_each(m, it, 0, T0) == 0);
	sluice_memstore_free(m);
}

/* ----------------------------------------------- shared-memory store */

static void shm_path(char *path, size_t len, const char *what)
{
	snprintf(path, len, "/dev/shm/sluice-test-contract-%d-%s",
		 (int)getpid(), what);
	unlink(path);
}

static void test_shmstore_open_shape(void)
{
	sluice_shmstore_t *s = (sluice_shmstore_t *)&s;
	sluice_memstore_stats_t st;
	char path[128], err[512];

	shm_path(path, sizeof(path), "open");
	err[0] = '\0';
	CHECK(sluice_shmstore_open(NULL, path, 10, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "out");
	err[0] = '\0';
	CHECK(sluice_shmstore_open(&s, NULL, 10, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	CHECK(s == NULL);
	said(err, "path");
	s = (sluice_shmstore_t *)&s;
	err[0] = '\0';
	CHECK(sluice_shmstore_open(&s, path, 0, err, sizeof(err)) ==
	      SLUICE_ERANGE);
	CHECK(s == NULL);
	said(err, path);
	s = (sluice_shmstore_t *)&s;
	err[0] = '\0';
	CHECK(sluice_shmstore_open(&s, "/nonexistent-dir/sluice", 10, err,
				   sizeof(err)) == SLUICE_ESTORE);
	CHECK(s == NULL);
	said(err, "/nonexistent-dir/sluice");
	s = (sluice_shmstore_t *)&s;
	err[0] = '\0';
	CHECK(sluice_shmstore_open_group(&s, path, 10,
					 "no-such-group-sluice-test", err,
					 sizeof(err)) == SLUICE_EINVAL);
	CHECK(s == NULL);
	said(err, "no-such-group-sluice-test");
	CHECK(access(path, F_OK) != 0); /* nothing made on a failure */

	CHECK(sluice_shmstore_open(&s, path, 10, NULL, 0) == 0);
	CHECK(s != NULL);
	sluice_shmstore_stats(s, &st);
	CHECK(st.max_keys == 10 && st.recovered == 0);
	CHECK(sluice_shmstore_check(s, err, sizeof(err)) == 0);
	sluice_shmstore_close(s);
	sluice_shmstore_close(NULL);
	/* Reopened for another max_keys: refused, said, *out NULL. */
	s = (sluice_shmstore_t *)&s;
	err[0] = '\0';
	CHECK(sluice_shmstore_open(&s, path, 11, err, sizeof(err)) ==
	      SLUICE_ESTORE);
	CHECK(s == NULL);
	said(err, "max_keys");
	unlink(path);
}

static void test_shmstore_calls_keep_the_header(void)
{
	sluice_shmstore_t *s;
	char path[128];
	local_t o;

	shm_path(path, sizeof(path), "calls");
	CHECK(sluice_shmstore_open(&s, path, 1000, NULL, 0) == 0);
	o = (local_t)LOCAL(sluice_shmstore, s);
	check_local(&o);
	sluice_shmstore_close(s);
	unlink(path);
}

/* -------------------------------------------------------- Redis store */

static void test_redis_url_functions(void)
{
	char err[256], out[128];

	err[0] = '\0';
	CHECK(sluice_redis_url_check("http://u:hunter2@h", err, sizeof(err)) ==
	      SLUICE_EINVAL);
	CHECK(err[0] != '\0');
	CHECK(strstr(err, "hunter2") == NULL);
	CHECK(sluice_redis_url_check(NULL, NULL, 0) == SLUICE_EINVAL);
	CHECK(sluice_redis_url_check("redis://127.0.0.1:6379/0", err,
				     sizeof(err)) == 0);

	CHECK(strcmp(sluice_redis_url_mask("redis://u:hunter2@h:1", out,
					   sizeof(out)),
		     "redis://u:***@h:1") == 0);
	CHECK(sluice_redis_url_mask("redis://h", NULL, 0) != NULL);
	CHECK(sluice_redis_url_mask(NULL, out, sizeof(out)) == out);
}

static void test_redis_event_names(void)
{
	int k;

	for (k = SLUICE_REDIS_EV_CONNECTED; k <= SLUICE_REDIS_EV_EVICTION;
	     k++) {
		const char *n =
			sluice_redis_event_name((sluice_redis_event_kind_t)k);

		CHECK(n != NULL && n[0] != '\0');
	}
	CHECK(sluice_redis_event_name((sluice_redis_event_kind_t)0) != NULL);
	CHECK(sluice_redis_event_name((sluice_redis_event_kind_t)999) != NULL);
}

/* sluice_redis_open() refuses with code and a message holding want,
 * *out NULL and nothing left on the loop. */
static void redis_refused(uv_loop_t *loop, const sluice_redis_opts_t *o,
			  int code, const char *want)
{
	sluice_redis_t *r = (sluice_redis_t *)&r;
	char err[256];

	err[0] = '\0';
	CHECK(sluice_redis_open(&r, loop, o, err, sizeof(err)) == code);
	CHECK(r == NULL);
	said(err, want);
	if (loop)
		CHECK(uv_run(loop, UV_RUN_NOWAIT) == 0);
}

static void test_redis_open_shape(void)
{
	sluice_redis_opts_t o;
	sluice_redis_tls_t tls;
	uv_loop_t loop;
	char err[64];

	uv_loop_init(&loop);
	memset(&o, 0, sizeof(o));
	o.url = "redis://127.0.0.1:1";
	err[0] = '\0';
	CHECK(sluice_redis_open(NULL, &loop, &o, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	said(err, "out");
	redis_refused(NULL, &o, SLUICE_EINVAL, "loop");
	redis_refused(&loop, NULL, SLUICE_EINVAL, "opts");
	o.url = "http://127.0.0.1:1";
	redis_refused(&loop, &o, SLUICE_EINVAL, "redis url");
	o.url = NULL;
	redis_refused(&loop, &o, SLUICE_EINVAL, "url");
	o.url = "redis://127.0.0.1:1";
	o.key_prefix = "a{b";
	redis_refused(&loop, &o, SLUICE_EINVAL, "key_prefix");
	o.key_prefix = NULL;
	memset(&tls, 0, sizeof(tls));
	tls.enabled = 1;
	tls.key_file = "/nonexistent/key.pem";
	o.tls = &tls;
	redis_refused(&loop, &o, SLUICE_EINVAL, "cert_file");
	tls.key_file = NULL;
	tls.ca_file = "/nonexistent/ca.pem";
	tls.verify = SLUICE_REDIS_TLS_VERIFY_OFF;
	redis_refused(&loop, &o, SLUICE_EINVAL, "/nonexistent/ca.pem");
	/* err may be NULL. */
	CHECK(sluice_redis_open(NULL, &loop, &o, NULL, 0) == SLUICE_EINVAL);
	CHECK(uv_loop_close(&loop) == 0);
	sluice_redis_free(NULL);
	sluice_redis_free_then(NULL, NULL, NULL);
}

/* A loopback port nobody listens on. */
static int closed_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(fd >= 0);
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static int calls;
static int last_status;

static void on_take(void *arg, int status, int allowed,
		    const sluice_decision_t *summary, size_t which)
{
	calls++;
	last_status = status;
}

static void on_many(void *arg, int status, int allowed)
{
	calls++;
	last_status = status;
}

/* Every malformed call: SLUICE_EINVAL, and its callback never runs; a
 * well-formed call to a Redis that is not there: 0, then its callback
 * once with a negative status. */
static void test_redis_calls_keep_the_header(void)
{
	sluice_limit_t one = lim("1", "1/h"), bad, many[SLUICE_MAX_LIMITS + 1];
	static char big[65536];
	sluice_take_item_t it[2];
	sluice_redis_opts_t o;
	sluice_redis_t *r;
	uv_loop_t loop;
	char url[64], err[256];
	size_t i;
	int64_t until;

	memset(&bad, 0, sizeof(bad));
	for (i = 0; i <= SLUICE_MAX_LIMITS; i++)
		many[i] = one;
	uv_loop_init(&loop);
	memset(&o, 0, sizeof(o));
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", closed_port());
	o.url = url;
	o.timeout_ms = 200;
	CHECK(sluice_redis_open(&r, &loop, &o, err, sizeof(err)) == 0);
	CHECK(r != NULL);
	CHECK(sluice_redis_healthy(r) == 0);

	calls = 0;
	CHECK(sluice_redis_take(r, "k", 1, &one, 0, 1, on_take, NULL) ==
	      SLUICE_EINVAL);
	CHECK(sluice_redis_take(r, "k", 1, many, SLUICE_MAX_LIMITS + 1, 1,
				on_take, NULL) == SLUICE_EINVAL);
	CHECK(sluice_redis_take(r, "k", 1, &bad, 1, 1, on_take, NULL) ==
	      SLUICE_EINVAL);
	CHECK(sluice_redis_take(r, big, sizeof(big), &one, 1, 1, on_take,
				NULL) == SLUICE_EINVAL);
	CHECK(sluice_redis_take(r, NULL, 1, &one, 1, 1, on_take, NULL) ==
	      SLUICE_EINVAL);
	CHECK(sluice_redis_peek(r, "k", 1, &one, 0, 1, on_take, NULL) ==
	      SLUICE_EINVAL);
	CHECK(sluice_redis_peek(r, "k", 1, &bad, 1, 1, on_take, NULL) ==
	      SLUICE_EINVAL);

	memset(it, 0, sizeof(it));
	it[0].key = "a";
	it[0].keylen = 1;
	it[0].limits = &one;
	it[0].nlimits = 1;
	it[0].cost = 1;
	it[1] = it[0];
	CHECK(sluice_redis_take_many(r, it, 0, on_many, NULL) == SLUICE_EINVAL);
	/* (One key in two items is well formed: each is charged.) */
	it[1].key = "b";
	it[1].limits = &bad;
	CHECK(sluice_redis_take_many(r, it, 2, on_many, NULL) == SLUICE_EINVAL);
	CHECK(sluice_redis_refund(r, it, 0, on_many, NULL) == SLUICE_EINVAL);
	CHECK(sluice_redis_refund(r, it, 2, on_many, NULL) == SLUICE_EINVAL);
	CHECK(sluice_redis_reset(r, it, 0, on_many, NULL) == SLUICE_EINVAL);
	CHECK(sluice_redis_reset(r, it, 2, on_many, NULL) == SLUICE_EINVAL);
	CHECK(sluice_redis_penalize(r, it, 2, on_many, NULL) == SLUICE_EINVAL);
	CHECK(sluice_redis_block(r, it, 2, 1000, on_many, NULL) ==
	      SLUICE_EINVAL);
	uv_run(&loop, UV_RUN_NOWAIT);
	CHECK(calls == 0);

	/* Well formed: accepted, and answered once, with a failure. */
	it[1].limits = &one;
	CHECK(sluice_redis_take(r, "k", 1, &one, 1, 1, on_take, NULL) == 0);
	CHECK(sluice_redis_take_many(r, it, 2, on_many, NULL) == 0);
	CHECK(sluice_redis_reset(r, it, 2, on_many, NULL) == 0);
	until = sluice_now_us() + 30 * INT64_C(1000000);
	while (calls < 3 && sluice_now_us() < until)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(calls == 3);
	CHECK(last_status == SLUICE_ESTORE || last_status == SLUICE_ETIMEDOUT);
	sluice_redis_free(r);
	uv_run(&loop, UV_RUN_DEFAULT);
	CHECK(uv_loop_close(&loop) == 0);
	CHECK(calls == 3);
}

int main(void)
{
	RUN(test_strerror_names_every_code);
	RUN(test_rate_parse_failures);
	RUN(test_rate_format_returns_length);
	RUN(test_limit_init_and_parse_failures);
	RUN(test_limit_predicates_answer_one_or_zero);
	RUN(test_decisions_answer_one_or_zero);
	RUN(test_pure_bucket_functions_return_values);
	RUN(test_key_make_returns_length);
	RUN(test_quota_calls_keep_the_header);
	RUN(test_memstore_open_shape);
	RUN(test_memstore_calls_keep_the_header);
	RUN(test_shmstore_open_shape);
	RUN(test_shmstore_calls_keep_the_header);
	RUN(test_redis_url_functions);
	RUN(test_redis_event_names);
	RUN(test_redis_open_shape);
	RUN(test_redis_calls_keep_the_header);
	TESTS_DONE();
}
