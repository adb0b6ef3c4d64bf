/*
 * rules.c -- which buckets a request touches: rule matching, key building,
 * tier selection and the client address behind trusted proxies.
 *
 * Everything here is a pure function of the config and the request: no
 * I/O and no allocation (except for paths over 4 KiB), so the HTTP layer
 * can call it on every request from any thread.
 *
 * Store keys are "<rule>\x1f<identity>" (sluice_key_make() in libsluice,
 * shared with /v1/take, the admin endpoints and the language bindings,
 * which says how an identity is encoded).  The identity is the value of
 * the first key source that is non-empty; a composite source joins its
 * parts with \x1f, and a value holding \x1f is no part.
 *
 * What a client controls never picks its bucket: a path matches in every
 * spelling a router would send to the same handler (every reading of
 * paths.c, see rule_applies()),
 * X-Forwarded-For is read from the right across all of its lines, and a
 * header used as an identity that comes on two lines is not used at all.
 */
#include "policy/config/config.h"
#include "util/addr.h"
#include "util/sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------- helpers */

/* The index-th line of header `name` (0 first), trimmed; NULL past the
 * last.  A request without header_line has at most one line per header. */
static const char *header_line(const sluice_request_t *req, const char *name,
			       size_t index, size_t *len)
{
	const char *v = NULL;

	*len = 0;
	if (req->header_line)
		v = req->header_line(req->header_ctx, name, index, len);
	else if (req->header && index == 0)
		v = req->header(req->header_ctx, name, len);
	if (!v) {
		*len = 0;
		return NULL;
	}
	return sluice_trim_ows(v, len);
}

/*
 * A header that names someone -- a key part, the tier, X-Real-IP: its
 * value when it came on exactly one line, else NULL (as if absent).  With
 * two lines, one may be the proxy's and one the client's, and which of
 * them comes first depends on the proxy (nginx proxy_set_header replaces,
 * HAProxy add-header appends): taking either would let some client pick
 * its own bucket, tier or address.
 */
static const char *identity_header(const sluice_request_t *req,
				   const char *name, size_t *len)
{
	const char *v = header_line(req, name, 0, len);
	size_t len2;

	if (v && header_line(req, name, 1, &len2)) {
		*len = 0;
		return NULL;
	}
	return v;
}

/* ------------------------------------------------------------ matching */

/*
 * Glob match: '*' matches any run of characters (including '/'), '?'
 * exactly one; everything else matches itself (without regard to ASCII
 * case when `nocase`).  Iterative with one backtrack point, so it is
 * linear-ish and cannot blow the stack on hostile paths.
 */
static int lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

static int glob_match(const char *pat, const char *s, size_t n, int nocase)
{
	const char *star = NULL;
	size_t i = 0, star_i = 0;

	while (i < n) {
		if (*pat == '*') {
			star = ++pat;
			star_i = i;
		} else if (*pat &&
			   (*pat == '?' || *pat == s[i] ||
			    (nocase && lower((unsigned char)*pat) ==
					       lower((unsigned char)s[i])))) {
			pat++;
			i++;
		} else if (star) {
			pat = star;
			i = ++star_i;
		} else {
			return 0;
		}
	}
	while (*pat == '*')
		pat++;
	return *pat == '\0';
}

int sluice_glob_match(const char *pat, const char *s, size_t n)
{
	return glob_match(pat, s, n, 0);
}

int sluice_glob_match_nocase(const char *pat, const char *s, size_t n)
{
	return glob_match(pat, s, n, 1);
}

/* GET names HEAD too: Express (and any router following RFC 9110 9.3.2)
 * answers HEAD with the GET handler, and nginx's limit_except GET allows
 * HEAD, so a client must not step around a GET rule with HEAD. */
static int method_matches(const char *rule, const char *m, size_t len)
{
	if (strlen(rule) == len && strncasecmp(rule, m, len) == 0)
		return 1;
	return len == 4 && strncasecmp(m, "HEAD", 4) == 0 &&
	       strcmp(rule, "GET") == 0;
}

/*
 * By default a path matches the spellings a common router (Express's
 * defaults) sends to the same handler: letters in any case, and with or
 * without one trailing slash ("/api/upload/" is "/api/upload"; the
 * pattern's own trailing slash was dropped at load).  path_case_sensitive
 * and path_strict_slash turn each off, like Express's "case sensitive
 * routing" and "strict routing".
 */
static int spelling_matches(const sluice_rule_t *r, const char *p, size_t len)
{
	int nocase = !r->path_case_sensitive;

	if (glob_match(r->path, p, len, nocase))
		return 1;
	return !r->path_strict_slash && len > 1 && p[len - 1] == '/' &&
	       glob_match(r->path, p, len - 1, nocase);
}

/*
 * One reading of the path, with the endings routers ignore: Caddy's path
 * matcher trims trailing dots and spaces ("/api/upload." and
 * "/api/upload%20" are "/api/upload"), and Rails' "(.:format)" and
 * Spring's suffix pattern match (before 5.3) give "/api/upload.json" to
 * "/api/upload": the last segment is also tried cut at its first dot and
 * at its last.  At most four more globs, whatever the path.
 */
static int reading_matches(const sluice_rule_t *r, const char *p, size_t len)
{
	int nocase = !r->path_case_sensitive;
	size_t base = len, t, seg, i, first = 0, last = 0;

	if (spelling_matches(r, p, len))
		return 1;
	if (!r->path_strict_slash && base > 1 && p[base - 1] == '/')
		base--;
	for (t = base; t > 1 && (p[t - 1] == '.' || p[t - 1] == ' ');)
		t--;
	if (t < base && glob_match(r->path, p, t, nocase))
		return 1;
	for (seg = base; seg > 0 && p[seg - 1] != '/';)
		seg--;
	for (i = seg + 1; i < base; i++) /* not a leading dot: ".json" */
		if (p[i] == '.') {
			if (!first)
				first = i;
			last = i;
		}
	if (first && glob_match(r->path, p, first, nocase))
		return 1;
	return last != first && glob_match(r->path, p, last, nocase);
}

/* Whether the rule applies: its method, and its path in any reading (so
 * a rule is charged once however many readings meet it). */
static int rule_applies(const sluice_rule_t *r, const sluice_request_t *req,
			const sluice_path_readings_t *pr)
{
	size_t i;

	if (r->nmethods > 0) {
		for (i = 0; i < r->nmethods; i++)
			if (req->method &&
			    method_matches(r->methods[i], req->method,
					   req->method_len))
				break;
		if (i == r->nmethods)
			return 0;
	}
	if (!r->path)
		return 1;
	for (i = 0; i < pr->n; i++)
		if (reading_matches(r, pr->p[i], pr->len[i]))
			return 1;
	return 0;
}

/* --------------------------------------------------------------- keys */

/* The client IP, computed at most once per request. */
typedef struct ipcache_s {
	int done;
	char buf[INET6_ADDRSTRLEN + 8];
	size_t len;
} ipcache_t;

static const char *part_value(const sluice_config_t *cfg,
			      const sluice_request_t *req,
			      const sluice_key_part_t *p, ipcache_t *ip,
			      size_t *len)
{
	if (p->kind == SLUICE_KEY_HEADER)
		return identity_header(req, p->header, len);
	if (!ip->done) {
		ip->len = sluice_client_ip(cfg, req, ip->buf, sizeof(ip->buf));
		ip->done = 1;
	}
	*len = ip->len;
	return ip->len ? ip->buf : NULL;
}

/* Writes "<rule>\x1f<identity>" into m->key, the identity being the
 * concatenation of bufs[0..nb). */
static void make_key(const char *name, const void *const *bufs,
		     const size_t *lens, size_t nb, sluice_match_t *m)
{
	m->keylen = sluice_key_make(name, bufs, lens, nb, m->key);
}

void sluice_rule_key(const sluice_rule_t *rule, const char *identity,
		     size_t len, sluice_match_t *m)
{
	const void *bufs[1] = {identity};
	size_t lens[1] = {len};

	const sluice_limit_set_t *ov;

	make_key(rule->name, bufs, lens, 1, m);
	/* An override beats the tier the caller chose. */
	if ((ov = sluice_rule_override(rule, bufs, lens, 1)))
		m->set = ov;
}

/* Fills m->key from the first non-empty key source of the rule; returns
 * 0, or -1 when every source is empty. */
static int build_key(const sluice_config_t *cfg, const sluice_request_t *req,
		     const sluice_rule_t *r, ipcache_t *ip, sluice_match_t *m)
{
	const void *bufs[2 * SLUICE_MAX_PARTS];
	size_t lens[2 * SLUICE_MAX_PARTS];
	size_t s, i, nb = 0;

	for (s = 0; s < r->nsources; s++) {
		const sluice_key_source_t *src = &r->sources[s];

		nb = 0;
		for (i = 0; i < src->nparts; i++) {
			size_t len;
			const char *v =
				part_value(cfg, req, &src->parts[i], ip, &len);

			/* A part holding the separator could pose as two
			 * (HTTP forbids control characters in values; only a
			 * caller building requests itself can pass one). */
			if (!v || len == 0 || memchr(v, 0x1f, len))
				break;
			if (i > 0) {
				bufs[nb] = "\x1f";
				lens[nb++] = 1;
			}
			bufs[nb] = v;
			lens[nb++] = len;
		}
		if (src->nparts > 0 && i == src->nparts)
			break;
	}
	if (s == r->nsources)
		return -1;
	make_key(r->name, bufs, lens, nb, m);
	/* An override beats tiers (sluice_rules_match() picks the set when
	 * this leaves it NULL). */
	m->set = sluice_rule_override(r, bufs, lens, nb);
	return 0;
}

/* -------------------------------------------------------------- tiers */

const sluice_limit_set_t *sluice_rule_tier(const sluice_rule_t *r,
					   const char *tier, size_t len)
{
	size_t i;

	if (r->ntiers == 0)
		return &r->limits;
	if (tier && len > 0)
		for (i = 0; i < r->ntiers; i++)
			if (strlen(r->tiers[i].name) == len &&
			    strncasecmp(r->tiers[i].name, tier, len) == 0)
				return &r->tiers[i];
	return &r->tiers[r->default_tier];
}

static const sluice_limit_set_t *pick_set(const sluice_rule_t *r,
					  const sluice_request_t *req)
{
	const char *v = NULL;
	size_t len = 0;

	if (r->ntiers > 0)
		v = identity_header(req, r->tier_header, &len);
	return sluice_rule_tier(r, v, len);
}

size_t sluice_rules_match(const sluice_config_t *cfg,
			  const sluice_request_t *req, sluice_match_t *out,
			  size_t max)
{
	ipcache_t ip = {0};
	sluice_path_readings_t pr;
	size_t i, n = 0;

	sluice_path_readings(req->path, req->path_len, &pr);

	for (i = 0; i < cfg->nrules && n < max; i++) {
		const sluice_rule_t *r = &cfg->rules[i];

		if (!rule_applies(r, req, &pr))
			continue;
		if (build_key(cfg, req, r, &ip, &out[n]) < 0)
			continue;
		out[n].rule = r;
		if (!out[n].set)
			out[n].set = pick_set(r, req);
		n++;
	}
	sluice_path_readings_free(&pr);
	return n;
}

/* ---------------------------------------------------------- client IP */

static int cidr_contains(const sluice_cidr_t *c, const sluice_addr_t *ad)
{
	unsigned full = c->prefix / 8, rest = c->prefix % 8;

	if (c->family != ad->family)
		return 0;
	if (memcmp(c->addr, ad->a, full) != 0)
		return 0;
	if (rest) {
		uint8_t mask = (uint8_t)(0xff << (8 - rest));

		if ((c->addr[full] & mask) != (ad->a[full] & mask))
			return 0;
	}
	return 1;
}

static int trusted(const sluice_config_t *cfg, const sluice_addr_t *ad)
{
	size_t i;

	for (i = 0; i < cfg->ntrusted; i++)
		if (cidr_contains(&cfg->trusted_proxies[i], ad))
			return 1;
	return 0;
}

/*
 * Walks X-Forwarded-For from the right (the entry our trusted peer added)
 * to the left, skipping entries that are themselves trusted proxies; the
 * first untrusted one is the client.  An entry that does not parse stops
 * the walk: everything left of it may be forged.  When every entry is a
 * trusted proxy, the left-most one is the client.
 *
 * Several lines are one list in order (RFC 9110 5.3): a proxy that adds a
 * line of its own (HAProxy's option forwardfor) puts it after the
 * client's, so the walk starts at the end of the last line and goes on
 * into the line before it.
 */

/* Walks one line from its right end.  Returns 1 when it ran out of
 * entries (every one a trusted proxy, or none): the walk goes on into the
 * line before; 0 when it stopped. */
static int xff_line(const sluice_config_t *cfg, const char *v, size_t n,
		    sluice_addr_t *out, int *found)
{
	while (n > 0) {
		const char *comma = NULL, *p;
		sluice_addr_t ad;

		for (p = v + n; p > v; p--)
			if (p[-1] == ',') {
				comma = p - 1;
				break;
			}
		p = comma ? comma + 1 : v;
		if (sluice_addr_parse(p, (size_t)(v + n - p), &ad) < 0) {
			size_t len = (size_t)(v + n - p);

			sluice_trim_ows(p, &len);
			if (len == 0 && comma) { /* tolerate "a, , b" */
				n = (size_t)(comma - v);
				continue;
			}
			return 0;
		}
		*out = ad;
		*found = 1;
		if (!trusted(cfg, &ad))
			return 0;
		n = comma ? (size_t)(comma - v) : 0;
	}
	return 1;
}

static int from_xff(const sluice_config_t *cfg, const sluice_request_t *req,
		    sluice_addr_t *out)
{
	static const char name[] = "x-forwarded-for";
	size_t lines = 0, k, n;
	int found = 0;

	while (header_line(req, name, lines, &n))
		lines++;
	for (k = lines; k-- > 0;) {
		const char *v = header_line(req, name, k, &n);

		if (!xff_line(cfg, v, n, out, &found))
			break;
	}
	return found ? 0 : -1;
}

size_t sluice_client_ip(const sluice_config_t *cfg, const sluice_request_t *req,
			char *buf, size_t len)
{
	sluice_addr_t peer, ad;
	const char *v;
	size_t n;

	if (len)
		buf[0] = '\0';
	if (sluice_addr_from_sockaddr(req->peer, &peer) < 0)
		return 0;
	ad = peer;
	if (trusted(cfg, &peer)) {
		/* X-Real-IP is one address: on two lines it is refused
		 * (see identity_header()) and X-Forwarded-For decides. */
		v = identity_header(req, "x-real-ip", &n);
		if (!v || sluice_addr_parse(v, n, &ad) < 0) {
			ad = peer;
			if (from_xff(cfg, req, &ad) < 0)
				ad = peer;
		}
	}
	return sluice_addr_key(&ad, cfg->ipv6_prefix, buf, len);
}

/* ---------------------------------------------------------- names */

void sluice_policy_name(const sluice_match_t *m, char *buf, size_t len)
{
	size_t n = strlen(m->rule->name), t;

	if (n >= len)
		n = len - 1;
	memcpy(buf, m->rule->name, n);
	if (m->rule->ntiers > 0 && n + 1 < len) {
		buf[n++] = '/';
		t = strlen(m->set->name);
		if (t >= len - n)
			t = len - n - 1;
		memcpy(buf + n, m->set->name, t);
		n += t;
	}
	buf[n] = '\0';
}

/* ------------------------------------------------------ ad-hoc keys */

void sluice_adhoc_key(const char *key, size_t len, sluice_match_t *m)
{
	static const char hex[] = "0123456789abcdef";
	const void *buf = key;
	uint8_t d[32];
	size_t i;

	/* \x1e cannot start a rule name, so ad-hoc keys never meet rule
	 * keys ("<rule>\x1f<identity>"). */
	m->key[0] = SLUICE_KEY_ADHOC;
	if (len + 2 <= sizeof(m->key) && (len == 0 || key[0] != '~')) {
		memcpy(m->key + 1, key, len);
		m->keylen = len + 1;
		m->key[m->keylen] = '\0';
		return;
	}
	/* A key longer than m->key holds (a caller's may be 400 bytes)
	 * becomes "~" and its SHA-256, as sluice_key_make() shortens
	 * identities: bounded, and no two keys share a bucket.  A key that
	 * starts with '~' is hashed too, so none can pose as a hash. */
	sluice_sha256(&buf, &len, 1, d);
	m->key[1] = '~';
	for (i = 0; i < 32; i++) {
		m->key[2 + 2 * i] = hex[d[i] >> 4];
		m->key[3 + 2 * i] = hex[d[i] & 15];
	}
	m->keylen = 66;
	m->key[66] = '\0';
}
