/*
 * test_redis_url.c -- where the Redis store connects, from its URL, and
 * the errors a wrong URL gets.
 */
#include "store/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			exit(1);                                               \
		}                                                              \
	} while (0)

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
	if (!strstr(err, needle)) {
		fprintf(stderr, "\"%s\": message \"%s\" lacks \"%s\"\n", text,
			err, needle);
		exit(1);
	}
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
	printf("redis URLs parsed, bad ones explained\n");
	return 0;
}
