/*
 * url.c -- where the Redis store connects:
 *   redis://[[user]:pass@]host[:port][/db]   (port 6379, db 0 by default)
 *   rediss://...                              the same over TLS
 *   unix:///path/to/redis.sock[?db=N]
 * plus "host:port" for cluster seeds (sluice_redis__parse_url() accepts a
 * bare host:port as well).
 */
#include "store/redis/redis_int.h"
#include "util/errmsg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dupn(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

/* Parses a decimal in [lo, hi] spanning exactly [s, e). */
static int number(const char *s, const char *e, long lo, long hi, long *v)
{
	long x = 0;

	if (s == e || e - s > 9)
		return -1;
	for (; s < e; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		x = x * 10 + (*s - '0');
	}
	if (x < lo || x > hi)
		return -1;
	*v = x;
	return 0;
}

static int parse_unix(const char *p, sluice_redis_url_t *u, const char *text,
		      char *err, size_t errlen)
{
	const char *q = strstr(p, "?db=");
	long db = 0;

	if (*p != '/')
		return sluice_fail(
			SLUICE_EINVAL, err, errlen,
			"redis url \"%s\": expected unix:///absolute/path",
			text);
	if (q && number(q + 4, q + strlen(q), 0, 1 << 20, &db) < 0)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis url \"%s\": db must be a number",
				   text);
	u->path = dupn(p, q ? (size_t)(q - p) : strlen(p));
	u->db = (int)db;
	return u->path ? 0 : SLUICE_ENOMEM;
}

int sluice_redis__parse_url(const char *text, sluice_redis_url_t *u, char *err,
			    size_t errlen)
{
	const char *p = text, *at, *hs, *he, *colon, *slash;
	long port = 6379, db = 0;

	memset(u, 0, sizeof(*u));
	if (!text || !*text)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis url is empty");
	if (strncmp(p, "unix://", 7) == 0)
		return parse_unix(p + 7, u, text, err, errlen);
	if (strncmp(p, "redis://", 8) == 0) {
		p += 8;
	} else if (strncmp(p, "rediss://", 9) == 0) {
		p += 9;
		u->tls = 1;
	} else if (strstr(p, "://")) {
		return sluice_fail(
			SLUICE_EINVAL, err, errlen,
			"redis url \"%s\": expected redis://host:port[/db], "
			"rediss://host:port[/db] (TLS) or unix:///path",
			text);
	}

	slash = strchr(p, '/');
	at = memchr(p, '@', slash ? (size_t)(slash - p) : strlen(p));
	if (at) {
		const char *c = memchr(p, ':', (size_t)(at - p));

		if (c) {
			if (c > p)
				u->user = dupn(p, (size_t)(c - p));
			u->pass = dupn(c + 1, (size_t)(at - c - 1));
		} else {
			u->pass = dupn(p, (size_t)(at - p));
		}
		p = at + 1;
	}
	hs = p;
	he = slash ? slash : p + strlen(p);
	colon = memchr(hs, ':', (size_t)(he - hs));
	if (colon) {
		if (number(colon + 1, he, 1, 65535, &port) < 0) {
			sluice_redis__url_free(u);
			return sluice_fail(
				SLUICE_EINVAL, err, errlen,
				"redis url \"%s\": port must be 1..65535",
				text);
		}
		he = colon;
	}
	if (he == hs) {
		sluice_redis__url_free(u);
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis url \"%s\": no host", text);
	}
	if (slash && slash[1] &&
	    number(slash + 1, slash + strlen(slash), 0, 1 << 20, &db) < 0) {
		sluice_redis__url_free(u);
		return sluice_fail(
			SLUICE_EINVAL, err, errlen,
			"redis url \"%s\": the path must be a db number", text);
	}
	u->host = dupn(hs, (size_t)(he - hs));
	u->port = (int)port;
	u->db = (int)db;
	return u->host ? 0 : SLUICE_ENOMEM;
}

void sluice_redis__url_free(sluice_redis_url_t *u)
{
	free(u->host);
	free(u->path);
	free(u->user);
	free(u->pass);
	memset(u, 0, sizeof(*u));
}
