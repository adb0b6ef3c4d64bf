/*
 * url.c -- where the Redis store connects:
 *   redis://[[user]:pass@]host[:port][/db][?query] (port 6379, db 0)
 *   rediss://...                              the same over TLS
 *   unix:///path/to/redis.sock[?query]
 * where the query may give db, password and username as redis-py's
 * from_url() reads them ("redis://host/0?password=X": each value
 * percent-decoded, '+' a space; given once, either way).
 * plus "host:port" for cluster seeds (sluice_redis__parse_url() accepts a
 * bare host[:port] as well).  host is a name, an IPv4 address or an IPv6
 * address in brackets ("[::1]:6379").  And the socket address a node's
 * host, port or path leads to (sluice_redis__sockaddr(), a name resolved
 * by sluice_redis__resolve_now() when the loop has no resolver).
 *
 * One parser for every reader: sluice_redis_open(so `check-config` and `serve`
 * agree) and the Node package.  The userinfo ends at the last '@' (a host, ),
 * the config loader (sluice_redis_url_check(), port or db never holds one), so
 * a password may contain '@' or '/'.
 *
 * A URL is never printed as given: every message shows it through
 * sluice_redis_url_mask(), "redis://user:***@host:port",
 * "redis://host/0?password=***".
 */
#include "store/redis/redis_int.h"
#include "util/errmsg.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

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

/* ------------------------------------------------- the parts of a URL */

/* Where the scheme ends ("redis://" etc.), or text itself. */
static const char *after_scheme(const char *text)
{
	const char *p = strstr(text, "://");

	return p ? p + 3 : text;
}

/* The query's parameters (redis-py's names). */
static const char *const query_keys[] = {"db", "password", "username"};

/* 1 when s starts with a known parameter and '='. */
static int known_param(const char *s)
{
	size_t i, n;

	for (i = 0; i < sizeof(query_keys) / sizeof(query_keys[0]); i++) {
		n = strlen(query_keys[i]);
		if (strncmp(s, query_keys[i], n) == 0 && s[n] == '=')
			return 1;
	}
	return 0;
}

/* Where the userinfo of the text after the scheme ends: its last '@'
 * before the query -- the first '?' that opens a known parameter (a
 * password before '@' may hold '@', '/' and '?'; one in the query writes
 * '@' as %40) -- or NULL. */
static const char *userinfo_end(const char *p)
{
	const char *q, *at = NULL, *c;

	for (q = strchr(p, '?'); q && !known_param(q + 1);
	     q = strchr(q + 1, '?'))
		;
	for (c = p; *c && c != q; c++)
		if (*c == '@')
			at = c;
	return at;
}

/* ------------------------------------------------------------- masking */

/* Appends [s, s + n) to out (room left: *left), truncating. */
static void put(char **o, size_t *left, const char *s, size_t n)
{
	if (n >= *left)
		n = *left - 1;
	memcpy(*o, s, n);
	*o += n;
	*left -= n;
	**o = '\0';
}

const char *sluice_redis_url_mask(const char *url, char *out, size_t outlen)
{
	const char *p, *at, *colon, *q, *e;
	char *o = out;
	size_t left = outlen;

	if (!out || !outlen)
		return "";
	if (!url) {
		snprintf(out, outlen, "(none)");
		return out;
	}
	out[0] = '\0';
	p = after_scheme(url);
	at = userinfo_end(p);
	if (at) {
		/* user:pass@ -> user:***@; pass@ (no user) -> ***@ */
		colon = memchr(p, ':', (size_t)(at - p));
		put(&o, &left, url, (size_t)((colon ? colon + 1 : p) - url));
		put(&o, &left, "***", 3);
		p = at;
	} else {
		put(&o, &left, url, (size_t)(p - url));
	}
	/* ?password=X and &password=X -> password=*** (any '?' after the
	 * host opens the query). */
	q = strchr(p, '?');
	put(&o, &left, p, q ? (size_t)(q - p) : strlen(p));
	while (q) {
		e = strchr(q + 1, '&');
		if (strncmp(q + 1, "password=", 9) == 0) {
			put(&o, &left, q, 10);
			put(&o, &left, "***", 3);
		} else {
			put(&o, &left, q, e ? (size_t)(e - q) : strlen(q));
		}
		q = e;
	}
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

static int hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
				      : -1;
}

/* [s, e) percent-decoded ('+' a space, as a query is); NULL with *bad
 * set for a '%' not followed by two hex digits or a decoded NUL. */
static char *decode(const char *s, const char *e, int *bad)
{
	char *d = malloc((size_t)(e - s) + 1), *o = d;

	*bad = 0;
	if (!d)
		return NULL;
	for (; s < e; s++) {
		if (*s == '%') {
			int h = e - s > 2 ? hexval(s[1]) : -1,
			    l = e - s > 2 ? hexval(s[2]) : -1;

			if (h < 0 || l < 0 || (h == 0 && l == 0)) {
				*bad = 1;
				free(d);
				return NULL;
			}
			*o++ = (char)(h * 16 + l);
			s += 2;
		} else {
			*o++ = *s == '+' ? ' ' : *s;
		}
	}
	*o = '\0';
	return d;
}

/* The query q (after '?'): db, password, username, each at most once
 * and never beside the same thing given before it (the path's db, the
 * userinfo).  *db_given says whether the path gave one. */
static int parse_query(const char *q, sluice_redis_url_t *u, int db_given,
		       const char *shown, char *err, size_t errlen)
{
	while (*q) {
		const char *amp = strchr(q, '&'),
			   *e = amp ? amp : q + strlen(q);
		const char *eq = memchr(q, '=', (size_t)(e - q));
		size_t klen = eq ? (size_t)(eq - q) : (size_t)(e - q);
		char **slot = NULL;
		int bad;
		long db;

		if (eq && klen == 2 && strncmp(q, "db", 2) == 0) {
			if (db_given++ ||
			    number(eq + 1, e, 0, 1 << 20, &db) < 0)
				return sluice_fail(
					SLUICE_EINVAL, err, errlen,
					"redis url \"%s\": db must be given "
					"once, a number (0..1048576)",
					shown);
			u->db = (int)db;
		} else if (eq && klen == 8 && strncmp(q, "password", 8) == 0) {
			slot = &u->pass;
		} else if (eq && klen == 8 && strncmp(q, "username", 8) == 0) {
			slot = &u->user;
		} else {
			return sluice_fail(
				SLUICE_EINVAL, err, errlen,
				"redis url \"%s\": unknown query parameter "
				"\"%.*s\": expected db, password or username "
				"(name=value, joined by '&')",
				shown, (int)(klen > 40 ? 40 : klen), q);
		}
		if (slot && *slot)
			return sluice_fail(
				SLUICE_EINVAL, err, errlen,
				"redis url \"%s\": the %s is given "
				"twice (before '@' and in the query, "
				"or twice in the query)",
				shown, *q == 'p' ? "password" : "user");
		if (slot && !(*slot = decode(eq + 1, e, &bad)))
			return bad ? sluice_fail(SLUICE_EINVAL, err, errlen,
						 "redis url \"%s\": a '%%' in "
						 "the query must be followed "
						 "by two hex digits (not %%00)",
						 shown)
				   : SLUICE_ENOMEM;
		q = amp ? amp + 1 : e;
	}
	return 0;
}

static int parse_unix(const char *p, sluice_redis_url_t *u, const char *shown,
		      char *err, size_t errlen)
{
	const char *q = strchr(p, '?');
	int rc;

	if (*p != '/')
		return sluice_fail(
			SLUICE_EINVAL, err, errlen,
			"redis url \"%s\": expected unix:///absolute/path",
			shown);
	if (q && (rc = parse_query(q + 1, u, 0, shown, err, errlen)) < 0)
		return rc;
	u->path = dupn(p, q ? (size_t)(q - p) : strlen(p));
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
	const char *at = userinfo_end(p), *hs, *he, *end, *slash, *port = NULL,
		   *q, *qe;
	long portv = 6379, db = 0;
	int rc;

	if (at && (rc = parse_userinfo(p, at, u)) < 0)
		return rc;
	hs = at ? at + 1 : p;
	q = strchr(hs, '?');
	qe = q ? q : hs + strlen(hs);
	slash = memchr(hs, '/', (size_t)(qe - hs));
	end = slash ? slash : qe;
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
	if (slash && slash + 1 < qe &&
	    number(slash + 1, qe, 0, 1 << 20, &db) < 0)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis url \"%s\": the path must be a db "
				   "number (0..1048576) and nothing after it "
				   "but a query (?password=...)",
				   shown);
	u->db = (int)db;
	if (q && (rc = parse_query(q + 1, u, slash && slash + 1 < qe, shown,
				   err, errlen)) < 0)
		return rc;
	u->host = dupn(hs, (size_t)(he - hs));
	u->port = (int)portv;
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

/* ------------------------------------------------ where a node leads */

int sluice_redis__sockaddr(const char *host, int port, const char *path,
			   struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_un *un = (struct sockaddr_un *)ss;
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (path) {
		if (strlen(path) >= sizeof(un->sun_path))
			return -1;
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path, path, strlen(path) + 1);
		*len = sizeof(*un);
		return 1;
	}
	if (inet_pton(AF_INET, host, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)port);
		*len = sizeof(*in);
		return 1;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*in6);
		return 1;
	}
	return 0;
}

int sluice_redis__resolve_now(const char *host, int port,
			      struct sockaddr_storage *ss, socklen_t *len,
			      char *why, size_t n)
{
	struct addrinfo hints, *res = NULL, *a;
	char portstr[16];
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(portstr, sizeof(portstr), "%d", port);
	if ((rc = getaddrinfo(host, portstr, &hints, &res)) != 0 || !res) {
		snprintf(why, n, "resolve: %s", gai_strerror(rc));
		return -1;
	}
	for (a = res; a && a->ai_family != AF_INET; a = a->ai_next)
		;
	a = a ? a : res;
	memcpy(ss, a->ai_addr, a->ai_addrlen);
	*len = a->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}
