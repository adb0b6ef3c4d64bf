/*
 * url.c -- where the Redis store connects:
 *   redis://[[user]:pass@]host[:port][/db]   (port 6379, db 0 by default)
 *   rediss://...                              the same over TLS
 *   unix:///path/to/redis.sock[?db=N]
 * plus "host:port" for cluster seeds (sluice_redis__parse_url() accepts a
 * bare host[:port] as well).  host is a name, an IPv4 address or an IPv6
 * address in brackets ("[::1]:6379").
 *
 * One parser for every reader: sluice_redis_open(so `check-config` and `serve`
 * agree) and the Node package.  The userinfo ends at the last '@' (a host, ),
 * the config loader (sluice_redis_url_check(), port or db never holds one), so
 * a password may contain '@' or '/'.
 *
 * A URL is never printed as given: every message shows it through
 * sluice_redis_url_mask(), "redis://user:***@host:port".
 */
#include "store/redis/redis_int.h"
#include "util/errmsg.h"

#include <ctype.h>
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

/* ------------------------------------------------------------- masking */

/* Where the scheme ends ("redis://" etc.), or text itself. */
static const char *after_scheme(const char *text)
{
	const char *p = strstr(text, "://");

	return p ? p + 3 : text;
}

const char *sluice_redis_url_mask(const char *url, char *out, size_t outlen)
{
	const char *p, *at, *colon;

	if (!out || !outlen)
		return "";
	if (!url) {
		snprintf(out, outlen, "(none)");
		return out;
	}
	p = after_scheme(url);
	at = strrchr(p, '@');
	if (!at) {
		snprintf(out, outlen, "%s", url);
		return out;
	}
	/* user:pass@ -> user:***@; pass@ (no user) -> ***@ */
	colon = memchr(p, ':', (size_t)(at - p));
	snprintf(out, outlen, "%.*s***%s", (int)((colon ? colon + 1 : p) - url),
		 url, at);
	return out;
}

/* -------------------------------------------------------------- parsing */

/* A host name or IPv4 address: letters, digits, '-', '.', '_'. */
static int host_ok(const char *s, const char *e)
{
	if (s == e)
		return 0;
	for (; s < e; s++)
		if (!isalnum((unsigned char)*s) && !strchr("-._", *s))
			return 0;
	return 1;
}

static int parse_unix(const char *p, sluice_redis_url_t *u, const char *shown,
		      char *err, size_t errlen)
{
	const char *q = strchr(p, '?');
	long db = 0;

	if (*p != '/')
		return sluice_fail(
			SLUICE_EINVAL, err, errlen,
			"redis url \"%s\": expected unix:///absolute/path",
			shown);
	if (q && (strncmp(q, "?db=", 4) != 0 ||
		  number(q + 4, q + strlen(q), 0, 1 << 20, &db) < 0))
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis url \"%s\": expected "
				   "unix:///path[?db=N], db a number",
				   shown);
	u->path = dupn(p, q ? (size_t)(q - p) : strlen(p));
	u->db = (int)db;
	return u->path ? 0 : SLUICE_ENOMEM;
}

/* user:pass@ in [p, at): fills u->user / u->pass. */
static int parse_userinfo(const char *p, const char *at, sluice_redis_url_t *u)
{
	const char *c = memchr(p, ':', (size_t)(at - p));

	if (c) {
		if (c > p && !(u->user = dupn(p, (size_t)(c - p))))
			return SLUICE_ENOMEM;
		u->pass = dupn(c + 1, (size_t)(at - c - 1));
	} else {
		u->pass = dupn(p, (size_t)(at - p));
	}
	return u->pass ? 0 : SLUICE_ENOMEM;
}

static int parse_tcp(const char *p, sluice_redis_url_t *u, const char *shown,
		     char *err, size_t errlen)
{
	const char *at = strrchr(p, '@'), *hs, *he, *end, *slash, *port = NULL;
	long portv = 6379, db = 0;
	int rc;

	if (at && (rc = parse_userinfo(p, at, u)) < 0)
		return rc;
	hs = at ? at + 1 : p;
	slash = strchr(hs, '/');
	end = slash ? slash : hs + strlen(hs);
	if (*hs == '[') {
		/* [IPv6]:port */
		const char *close = memchr(hs, ']', (size_t)(end - hs));

		if (!close || close == hs + 1 ||
		    strspn(hs + 1, "0123456789abcdefABCDEF:.") !=
			    (size_t)(close - hs - 1))
			return sluice_fail(SLUICE_EINVAL, err, errlen,
					   "redis url \"%s\": expected "
					   "[IPv6 address] in brackets",
					   shown);
		he = close + 1;
		if (he < end && *he != ':')
			return sluice_fail(SLUICE_EINVAL, err, errlen,
					   "redis url \"%s\": expected ':port' "
					   "after the address",
					   shown);
		port = he < end ? he + 1 : NULL;
		hs++;
		he = close;
	} else {
		he = memchr(hs, ':', (size_t)(end - hs));
		port = he ? he + 1 : NULL;
		if (!he)
			he = end;
		if (he == hs)
			return sluice_fail(SLUICE_EINVAL, err, errlen,
					   "redis url \"%s\": no host", shown);
		if (!host_ok(hs, he))
			return sluice_fail(
				SLUICE_EINVAL, err, errlen,
				"redis url \"%s\": the host may hold only "
				"letters, digits, '-', '.' and '_' (an IPv6 "
				"address goes in brackets)",
				shown);
	}
	if (port && number(port, end, 1, 65535, &portv) < 0)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis url \"%s\": port must be 1..65535",
				   shown);
	if (slash && slash[1] &&
	    number(slash + 1, slash + strlen(slash), 0, 1 << 20, &db) < 0)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis url \"%s\": the path must be a db "
				   "number (0..1048576) and nothing after it",
				   shown);
	u->host = dupn(hs, (size_t)(he - hs));
	u->port = (int)portv;
	u->db = (int)db;
	return u->host ? 0 : SLUICE_ENOMEM;
}

int sluice_redis__parse_url(const char *text, sluice_redis_url_t *u, char *err,
			    size_t errlen)
{
	char shown[160];
	int rc;

	memset(u, 0, sizeof(*u));
	if (!text || !*text)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis url is empty");
	sluice_redis_url_mask(text, shown, sizeof(shown));
	if (strpbrk(text, " \t\r\n"))
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis url \"%s\": contains white space",
				   shown);
	if (strncmp(text, "unix://", 7) == 0)
		rc = parse_unix(text + 7, u, shown, err, errlen);
	else if (strncmp(text, "redis://", 8) == 0)
		rc = parse_tcp(text + 8, u, shown, err, errlen);
	else if (strncmp(text, "rediss://", 9) == 0) {
		u->tls = 1;
		rc = parse_tcp(text + 9, u, shown, err, errlen);
	} else if (strstr(text, "://"))
		rc = sluice_fail(
			SLUICE_EINVAL, err, errlen,
			"redis url \"%s\": expected redis://host:port[/db], "
			"rediss://host:port[/db] (TLS) or unix:///path",
			shown);
	else
		rc = parse_tcp(text, u, shown, err, errlen);
	if (rc < 0)
		sluice_redis__url_free(u);
	if (rc == SLUICE_ENOMEM)
		sluice_fail(rc, err, errlen, "redis url: out of memory");
	return rc;
}

void sluice_redis__url_free(sluice_redis_url_t *u)
{
	free(u->host);
	free(u->path);
	free(u->user);
	free(u->pass);
	memset(u, 0, sizeof(*u));
}

int sluice_redis_url_check(const char *url, char *err, size_t errlen)
{
	sluice_redis_url_t u;
	int rc = sluice_redis__parse_url(url, &u, err, errlen);

	if (rc == 0)
		sluice_redis__url_free(&u);
	return rc;
}
