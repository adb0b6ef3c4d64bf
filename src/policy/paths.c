/*
 * paths.c -- the readings of a request path: how each kind of router
 * turns the request target it was sent into the path it routes by.
 *
 * A path rule must meet every request that some router in front of or
 * behind sluice sends to the rule's handler, and routers disagree:
 *
 *   nginx ($uri), Caddy    every escape decoded (%2F too), ';' literal,
 *                          slashes merged, dot segments resolved
 *   Tomcat, Jetty, Spring  ';' path parameters dropped from each segment
 *                          before decoding, then resolved
 *   a proxy passing its    decoded first, then parameters dropped (nginx
 *   decoded path to one    proxy_pass with a URI part, to Tomcat)
 *   Express 4 and 5        the raw pathname: nothing decoded or resolved
 *                          ("/x/../y" is "/x/:id/y" with id "..")
 *   Fastify (find-my-way)  escapes decoded but %2F, nothing resolved;
 *                          with useSemicolonDelimiter ';' ends the path
 *
 * sluice_path_readings() computes each (dropping duplicates) and a rule
 * applies when any reading matches it (rules.c), so whichever of them
 * routes the request, the rule's bucket is charged, once.
 */
#include "policy/rules.h"

#include <stdlib.h>
#include <string.h>

/* What a reading does to the target, in this order. */
enum {
	DECODE_NONE = 0, /* escapes kept */
	DECODE_ALL,	 /* every escape but %00 */
	DECODE_NOT_SLASH /* every escape but %2F and %00 */
};
enum {
	PARAMS_KEEP = 0, /* ';' is a character like any other */
	PARAMS_RAW,	 /* ";..." dropped from each segment, before decoding */
	PARAMS_DECODED,	 /* the same after decoding (%3B is ';' then) */
	PARAMS_END	 /* the first ';' ends the path */
};

typedef struct reading_s {
	unsigned char decode, params, resolve;
} reading_t;

/* The first is the canonical form: sluice_path_normalize(). */
static const reading_t readings[SLUICE_PATH_READINGS] = {
	{DECODE_ALL, PARAMS_DECODED, 1},    /* a proxy, then a servlet app */
	{DECODE_ALL, PARAMS_KEEP, 1},	    /* nginx $uri, Caddy */
	{DECODE_ALL, PARAMS_RAW, 1},	    /* Tomcat, Jetty, Spring */
	{DECODE_NONE, PARAMS_KEEP, 0},	    /* Express */
	{DECODE_NOT_SLASH, PARAMS_KEEP, 0}, /* Fastify */
	{DECODE_NOT_SLASH, PARAMS_END, 0},  /* Fastify, ';' delimiter */
};

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes escapes once ("%2575" is "%75"); %00 (which would end the
 * string; nginx refuses it) and, with DECODE_NOT_SLASH, %2F stay, in one
 * spelling.  The output is never longer than the input. */
static size_t decode_escapes(const char *in, size_t n, char *out, int mode)
{
	size_t i = 0, o = 0;

	while (i < n) {
		int hi, lo, v;

		if (in[i] != '%' || i + 2 >= n ||
		    (hi = hexval(in[i + 1])) < 0 ||
		    (lo = hexval(in[i + 2])) < 0) {
			out[o++] = in[i++];
			continue;
		}
		v = hi * 16 + lo;
		if (v == 0 || (v == '/' && mode == DECODE_NOT_SLASH)) {
			out[o++] = '%';
			out[o++] = v ? '2' : '0';
			out[o++] = v ? 'F' : '0';
		} else {
			out[o++] = (char)v;
		}
		i += 3;
	}
	return o;
}

/* Drops ";..." up to the end of each segment ("/api;x/upload;" is
 * "/api/upload"; "/..;/" is "/../"), in place. */
static size_t drop_params(char *buf, size_t m)
{
	size_t r = 0, w = 0;

	while (r < m) {
		if (buf[r] == ';') {
			while (r < m && buf[r] != '/')
				r++;
			continue;
		}
		buf[w++] = buf[r++];
	}
	return w;
}

/* Merges runs of '/' and resolves "." and ".." segments (RFC 3986 5.2.4;
 * ".." at the root stays at the root), in place.  A trailing slash
 * stays. */
static size_t resolve_segments(char *buf, size_t m)
{
	size_t r = 0, w = 0, s, seglen;

	while (r < m) {
		if (buf[r] != '/') {
			buf[w++] = buf[r++];
			continue;
		}
		while (r < m && buf[r] == '/')
			r++;
		s = r;
		while (r < m && buf[r] != '/')
			r++;
		seglen = r - s;
		if (seglen == 2 && buf[s] == '.' && buf[s + 1] == '.') {
			while (w > 0 && buf[w - 1] != '/')
				w--;
			if (w > 0)
				w--;
			seglen = 0;
		} else if (seglen == 1 && buf[s] == '.') {
			seglen = 0;
		}
		if (seglen == 0) {
			if (r == m) /* a trailing slash stays */
				buf[w++] = '/';
			continue;
		}
		buf[w++] = '/';
		memmove(buf + w, buf + s, seglen);
		w += seglen;
	}
	return w;
}

/* One reading of in[0..n) into out (at most n bytes). */
static size_t read_as(const reading_t *rd, const char *in, size_t n, char *out)
{
	size_t m;
	const char *semi;

	memmove(out, in, n); /* out may be in */
	m = n;
	if (rd->params == PARAMS_RAW)
		m = drop_params(out, m);
	m = decode_escapes(out, m, out, rd->decode);
	if (rd->params == PARAMS_DECODED)
		m = drop_params(out, m);
	if (rd->params == PARAMS_END && (semi = memchr(out, ';', m)))
		m = (size_t)(semi - out);
	if (rd->resolve)
		m = resolve_segments(out, m);
	return m;
}

size_t sluice_path_normalize(const char *in, size_t n, char *out)
{
	return read_as(&readings[0], in, n, out);
}

/* "http://host:80/a?b" (an absolute-form target, RFC 9112 3.2.2, which a
 * proxy may pass on as the original URI) is the path "/a?b". */
static const char *skip_authority(const char *in, size_t *n)
{
	const char *slash = memchr(in, '/', *n), *end = in + *n, *p;

	if (*n == 0 || in[0] == '/' || !slash || slash == in ||
	    slash[-1] != ':' || slash + 1 >= end || slash[1] != '/')
		return in;
	for (p = in; p < slash - 1; p++) /* scheme = ALPHA *( ALPHA / ... ) */
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (p > in && ((*p >= '0' && *p <= '9') || *p == '+' ||
				  *p == '-' || *p == '.'))))
			return in;
	p = memchr(slash + 2, '/', (size_t)(end - slash - 2));
	if (!p) { /* "http://host" or "http://host?q": the root */
		*n = 1;
		return "/";
	}
	*n = (size_t)(end - p);
	return p;
}

/* Whether a reading can differ from the first one: the Express and
 * Fastify readings whenever there is anything to decode or resolve, the
 * parameter readings only when there is a ';' (or an escaped one). */
static int worth_reading(const reading_t *rd, const char *in, size_t n)
{
	size_t i;

	if (!rd->resolve)
		return 1;
	for (i = 0; i < n; i++)
		if (in[i] == ';' ||
		    (in[i] == '%' && i + 2 < n && in[i + 1] == '3' &&
		     (in[i + 2] == 'b' || in[i + 2] == 'B')))
			return 1;
	return 0;
}

void sluice_path_readings(const char *path, size_t len,
			  sluice_path_readings_t *pr)
{
	const char *in = path ? path : "";
	size_t n = path ? len : 0, i, k, total;
	char *buf;

	in = skip_authority(in, &n);
	for (i = 0; i < n; i++) /* the query and fragment are not the path */
		if (in[i] == '?' || in[i] == '#')
			n = i;
	pr->heap = NULL;
	pr->n = 0;
	total = n * SLUICE_PATH_READINGS;
	buf = pr->stack;
	if (total > sizeof(pr->stack)) {
		buf = pr->heap = malloc(total);
		if (!buf) { /* the raw path, rather than no answer */
			pr->p[0] = in;
			pr->len[0] = n;
			pr->n = 1;
			return;
		}
	}
	for (i = 0; i < SLUICE_PATH_READINGS; i++) {
		char *out = buf + i * n;
		size_t m;

		if (i > 0 && !worth_reading(&readings[i], in, n))
			continue;
		m = read_as(&readings[i], in, n, out);
		for (k = 0; k < pr->n; k++) /* one reading once */
			if (pr->len[k] == m && memcmp(pr->p[k], out, m) == 0)
				break;
		if (k < pr->n)
			continue;
		pr->p[pr->n] = out;
		pr->len[pr->n++] = m;
	}
}

void sluice_path_readings_free(sluice_path_readings_t *pr)
{
	free(pr->heap);
	pr->heap = NULL;
}
