/*
 * test_redis_url.c -- where the Redis store connects, from its URL, the
 * errors a wrong URL or option gets, and what a call to an unreachable
 * Redis answers.
 */
#include "store/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int streq(const char *a, const char *b)
{
	return a && b ? strcmp(a, b) == 0 : a == b;
}

static void ok(const char *text, const char *host, int port, const char *path,
	       const char *user, const char *pass, int db)
{
	sluice_redis_url_t u;
	char err[256];

	CHECK(sluice_redis__parse_url(text, &u, err, sizeof(err)) == 0);
	CHECK(streq(u.host, host) && u.port == port && streq(u.path, path));
	CHECK(streq(u.user, user) && streq(u.pass, pass) && u.db == db);
	sluice_redis__url_free(&u);
}

static void bad(const char *text, const char *needle)
{
	sluice_redis_url_t u;
	char err[256] = "";

	CHECK(sluice_redis__parse_url(text, &u, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	CHECK(strstr(err, "S3CRET") == NULL);
	if (!strstr(err, needle)) {
		fprintf(stderr, "\"%s\": message \"%s\" lacks \"%s\"\n", text,
			err, needle);
		exit(1);
	}
}

static void masked(const char *url, const char *want)
{
	char out[128];

	CHECK(strcmp(sluice_redis_url_mask(url, out, sizeof(out)), want) == 0);
}

static void opts_bad(const char *url, const char *prefix, const char *seed,
		     const char *needle)
{
	const char *seeds[1] = {seed};
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r = (sluice_redis_t *)1;
	char err[256] = "";
	uv_loop_t loop;

	uv_loop_init(&loop);
	o.url = url;
	o.key_prefix = prefix;
	if (seed) {
		o.seeds = seeds;
		o.nseeds = 1;
	}
	CHECK(sluice_redis_open(&r, &loop, &o, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	CHECK(r == NULL);
	if (!strstr(err, needle)) {
		fprintf(stderr, "message \"%s\" lacks \"%s\"\n", err, needle);
		exit(1);
	}
	/* Nothing was left on the loop. */
	CHECK(uv_loop_close(&loop) == 0);
}

static int answered, answer;

static void on_answer(void *arg, int status, int allowed,
		      const sluice_decision_t *d, size_t which)
{
	answered++;
	answer = status;
}

/* Nothing listens: the call fails with a store error, nothing crashes. */
static void test_unreachable_redis(void)
{
	sluice_redis_opts_t o = {0};
	sluice_limit_t l;
	sluice_redis_t *r;
	char err[256];
	uv_loop_t loop;

	uv_loop_init(&loop);
	o.url = "redis://127.0.0.1:1";
	CHECK(sluice_redis_open(&r, &loop, &o, err, sizeof(err)) == 0);
	CHECK(!sluice_redis_healthy(r));
	CHECK(sluice_limit_parse(&l, "10", "1/s", NULL, 0) == 0);
	CHECK(sluice_redis_take(r, "k", 1, &l, 1, 1, on_answer, NULL) == 0);
	while (!answered)
		uv_run(&loop, UV_RUN_ONCE);
	CHECK(answer == SLUICE_ESTORE || answer == SLUICE_ETIMEDOUT);
	CHECK(sluice_redis_take(r, "k", 1, &l, 0, 1, on_answer, NULL) ==
	      SLUICE_EINVAL);
	sluice_redis_free(r);
	uv_run(&loop, UV_RUN_DEFAULT);
	CHECK(uv_loop_close(&loop) == 0);
}

int main(void)
{
	ok("redis://localhost", "localhost", 6379, NULL, NULL, NULL, 0);
	ok("redis://127.0.0.1:7000", "127.0.0.1", 7000, NULL, NULL, NULL, 0);
	ok("redis://127.0.0.1:7000/3", "127.0.0.1", 7000, NULL, NULL, NULL, 3);
	ok("redis://:secret@h:1/", "h", 1, NULL, NULL, "secret", 0);
	ok("redis://bob:secret@h:1", "h", 1, NULL, "bob", "secret", 0);
	ok("redis://secret@h", "h", 6379, NULL, NULL, "secret", 0);
	ok("10.0.0.1:7001", "10.0.0.1", 7001, NULL, NULL, NULL, 0);
	ok("unix:///run/redis.sock", NULL, 0, "/run/redis.sock", NULL, NULL, 0);
	ok("unix:///run/redis.sock?db=2", NULL, 0, "/run/redis.sock", NULL,
	   NULL, 2);
	bad("", "empty");
	bad("http://h:1", "expected redis://");
	bad("redis://h:0", "port must be 1..65535");
	bad("redis://h:99999", "port must be 1..65535");
	bad("redis://h:x", "port");
	bad("redis://:1", "no host");
	bad("redis://h:1/abc", "db number");
	bad("unix://relative", "absolute");
	/* Everything after the db, odd hosts, spaces: refused. */
	bad("redis://h:6379/0?timeout=1",
	    "unknown query parameter \"timeout\"");
	bad("redis://h:6379/0/1", "db number");
	bad("redis://h:6379 x", "white space");
	bad("redis://h?x", "unknown query parameter \"x\"");
	bad("redis://h;x", "the host may hold only");
	bad("redis://", "no host");
	bad("redis://[::1", "brackets");
	bad("redis://[::1]x", "':port'");
	bad("unix:///s?dbx=1", "unknown query parameter \"dbx\"");
	/* IPv6 in brackets; a password holding '@' and '/'. */
	ok("redis://[::1]:7000/1", "::1", 7000, NULL, NULL, NULL, 1);
	ok("redis://u:p@ss/w@h:1/2", "h", 1, NULL, "u", "p@ss/w", 2);
	/* Messages show the URL masked, never its password. */
	bad("redis://app:S3CRETpw@h:99999", "\"redis://app:***@h:99999\"");
	bad("rediss://S3CRETpw@h:1/x", "\"rediss://***@h:1/x\"");
	masked("redis://app:S3CRETpw@h:1/2", "redis://app:***@h:1/2");
	masked("redis://:S3CRETpw@h", "redis://:***@h");
	masked("redis://S3CRETpw@h", "redis://***@h");
	masked("redis://u:p@ss/w@h:1", "redis://u:***@h:1");
	masked("redis://h:1", "redis://h:1");
	masked("unix:///run/r.sock", "unix:///run/r.sock");
	masked("a:S3CRETpw@h:7000", "a:***@h:7000");
	/* The password in the query (redis-py's form): accepted, and
	 * masked wherever the URL is shown. */
	ok("redis://h/0?password=secret", "h", 6379, NULL, NULL, "secret", 0);
	ok("rediss://h:1/2?username=bob&password=a%40b%26c+d", "h", 1, NULL,
	   "bob", "a@b&c d", 2);
	ok("redis://h?db=3&password=p", "h", 6379, NULL, NULL, "p", 3);
	ok("unix:///run/r.sock?password=p&db=4", NULL, 0, "/run/r.sock", NULL,
	   "p", 4);
	ok("redis://:p?w@h:1", "h", 1, NULL, NULL, "p?w", 0);
	bad("redis://h:99999/0?password=S3CRETpw",
	    "\"redis://h:99999/0?password=***\"");
	bad("redis://h/0?password=S3CRETpw&timeout=1",
	    "\"redis://h/0?password=***&timeout=1\"");
	bad("redis://:S3CRETpw@h/0?password=S3CRETpw", "given twice");
	bad("redis://h/1?db=2&password=S3CRETpw", "db must be given once");
	bad("redis://h/0?password=S3CRET%zz", "two hex digits");
	masked("redis://h/0?password=S3CRETpw", "redis://h/0?password=***");
	masked("rediss://u@h:1?db=1&password=S3CRETpw&username=u",
	       "rediss://***@h:1?db=1&password=***&username=u");
	masked("redis://a:S3CRETpw@h/0?password=S3CRETpw",
	       "redis://a:***@h/0?password=***");
	masked("unix:///s?password=S3CRETpw", "unix:///s?password=***");
	masked("redis://h/0?password=S3CRET@pw", "redis://h/0?password=***");
	opts_bad("redis://h:0?password=S3CRETpw", NULL, NULL,
		 "h:0?password=***");
	opts_bad("redis://app:S3CRETpw@h:0", NULL, NULL, "app:***@h:0");
	opts_bad(NULL, NULL, NULL, "a url, cluster seeds or Sentinels");
	opts_bad("redis://h:0", NULL, NULL, "port must be 1..65535");
	opts_bad("redis://h", "a{b", NULL, "must not contain");
	opts_bad(NULL, NULL, "unix:///tmp/x", "expected host:port");
	test_unreachable_redis();
	printf("redis URLs parsed, bad ones explained\n");
	return 0;
}
