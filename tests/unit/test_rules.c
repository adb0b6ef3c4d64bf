/*
 * test_rules.c -- which buckets a request touches: matching, path globs,
 * store keys (composites, fallbacks, over-long values), tiers, and the
 * client address behind trusted proxies (X-Forwarded-For spoofing, IPv6
 * grouping, IPv4-mapped peers).
 */
#include "check.h"
#include "policy/config/config.h"
#include "util/addr.h"
#include "util/sha256.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------ requests */

typedef struct hdr_s {
	const char *name, *value;
} hdr_t;

typedef struct req_s {
	sluice_request_t r;
	hdr_t hdrs[8];
	struct sockaddr_storage peer;
} req_t;

static const char *lookup(void *ctx, const char *name, size_t *len)
{
	hdr_t *h = ctx;

	for (; h->name; h++)
		if (strcasecmp(h->name, name) == 0) {
			*len = strlen(h->value);
			return h->value;
		}
	return NULL;
}

/* Every line of a header, as the HTTP layer offers them. */
static const char *lookup_line(void *ctx, const char *name, size_t index,
			       size_t *len)
{
	hdr_t *h = ctx;

	for (; h->name; h++)
		if (strcasecmp(h->name, name) == 0 && index-- == 0) {
			*len = strlen(h->value);
			return h->value;
		}
	return NULL;
}

/* A request from `peer` ("1.2.3.4" or an IPv6 address) with headers given
 * as name, value pairs ending with NULL. */
static req_t *mkreq(req_t *q, const char *method, const char *path,
		    const char *peer, ...)
{
	va_list ap;
	size_t n = 0;
	const char *name;

	memset(q, 0, sizeof(*q));
	va_start(ap, peer);
	while ((name = va_arg(ap, const char *)) && n < 7) {
		q->hdrs[n].name = name;
		q->hdrs[n].value = va_arg(ap, const char *);
		n++;
	}
	va_end(ap);
	if (strchr(peer, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&q->peer;

		s6->sin6_family = AF_INET6;
		inet_pton(AF_INET6, peer, &s6->sin6_addr);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&q->peer;

		s4->sin_family = AF_INET;
		inet_pton(AF_INET, peer, &s4->sin_addr);
	}
	q->r.method = method;
	q->r.method_len = strlen(method);
	q->r.path = path;
	q->r.path_len = strlen(path);
	q->r.header = lookup;
	q->r.header_line = lookup_line;
	q->r.header_ctx = q->hdrs;
	q->r.peer = (struct sockaddr *)&q->peer;
	return q;
}

static sluice_config_t *load(const char *text)
{
	char err[512];
	sluice_config_t *c = sluice_config_parse("t.yaml", text, strlen(text),
						 err, sizeof(err));

	if (!c) {
		fprintf(stderr, "config: %s\n", err);
		exit(1);
	}
	return c;
}

static int key_is(const sluice_match_t *m, const char *rule, const char *id)
{
	char want[600];
	int n = snprintf(want, sizeof(want), "%s\x1f%s", rule, id);

	return m->keylen == (size_t)n && memcmp(m->key, want, (size_t)n) == 0 &&
	       m->key[n] == '\0';
}

static const char *client_ip(const sluice_config_t *c, req_t *q)
{
	static char buf[64];

	sluice_client_ip(c, &q->r, buf, sizeof(buf));
	return buf;
}

/* --------------------------------------------------------------- globs */

static void test_glob(void)
{
	char long_a[4096];

	CHECK(sluice_glob_match("/api/*", "/api/a/b", 8));
	CHECK(sluice_glob_match("/api/*", "/api/", 5));
	CHECK(!sluice_glob_match("/api/*", "/apix", 5));
	CHECK(!sluice_glob_match("/api/*", "/api", 4));
	CHECK(sluice_glob_match("*", "", 0));
	CHECK(sluice_glob_match("*", "/anything", 9));
	CHECK(sluice_glob_match("/v?/x", "/v1/x", 5));
	CHECK(!sluice_glob_match("/v?/x", "/v12/x", 6));
	CHECK(sluice_glob_match("/a*b*c", "/aXXbYYc", 8));
	CHECK(!sluice_glob_match("/a*b*c", "/aXXbYYcd", 9));
	CHECK(sluice_glob_match("/exact", "/exact", 6));
	CHECK(!sluice_glob_match("/exact", "/exac", 5));
	/* only len bytes count, no NUL needed */
	CHECK(sluice_glob_match("/ab", "/abc", 3));
	/* hostile pattern/path pairs finish quickly */
	memset(long_a, 'a', sizeof(long_a));
	CHECK(!sluice_glob_match("*a*a*a*a*a*a*a*b", long_a, sizeof(long_a)));
}

/* ------------------------------------------------------------ matching */

static void test_default_rule_keys_user_then_ip(void)
{
	sluice_config_t *c = sluice_config_default();
	sluice_match_t m[4];
	req_t q;

	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/", "203.0.113.9",
					"X-User-Id", "alice", NULL)
					  ->r,
				 m, 4) == 2);
	CHECK(key_is(&m[0], "default", "alice"));
	CHECK(m[0].rule == &c->rules[0] && m[0].set == &c->rules[0].limits);
	/* whoever the user says it is, its address has a ceiling too */
	CHECK(key_is(&m[1], "default-ip", "203.0.113.9"));
	CHECK(m[1].rule == &c->rules[1] && m[1].set == &c->rules[1].limits);
	/* no user: the client IP */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/", "203.0.113.9", NULL)->r,
				 m, 4) == 2);
	CHECK(key_is(&m[0], "default", "203.0.113.9"));
	CHECK(key_is(&m[1], "default-ip", "203.0.113.9"));
	/* a blank header counts as absent */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/", "203.0.113.9",
					"x-user-id", "  \t ", NULL)
					  ->r,
				 m, 4) == 2);
	CHECK(key_is(&m[0], "default", "203.0.113.9"));
	/* surrounding whitespace is not part of the identity */
	sluice_rules_match(c,
			   &mkreq(&q, "GET", "/", "203.0.113.9", "x-user-id",
				  " bob ", NULL)
				    ->r,
			   m, 4);
	CHECK(key_is(&m[0], "default", "bob"));
	sluice_config_free(c);
}

static const char two_rules[] =
	"rules:\n"
	"  - name: api\n"
	"    key: [\"header:x-user-id\", ip]\n"
	"    limits: [{capacity: 100, rate: 2/s}, {capacity: 10000, rate: "
	"10000/day}]\n"
	"  - name: upload\n"
	"    match: {methods: [POST, put], path: \"/api/upload*\"}\n"
	"    key: \"header:x-api-key+ip\"\n"
	"    cost: 10\n"
	"    limits: [{capacity: 50, rate: 50/min}]\n"
	"  - name: partner\n"
	"    match: {path: \"/partner/*\"}\n"
	"    key: \"header:x-partner\"\n"
	"    limits: [{capacity: 5, rate: 1/s}]\n";

static void test_methods_paths_and_query_strings(void)
{
	sluice_config_t *c = load(two_rules);
	sluice_match_t m[4];
	req_t q;

	/* every rule that matches is reported, in file order */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "POST", "/api/upload", "10.1.1.1",
					"x-api-key", "k1", NULL)
					  ->r,
				 m, 4) == 2);
	CHECK(strcmp(m[0].rule->name, "api") == 0);
	CHECK(strcmp(m[1].rule->name, "upload") == 0);
	CHECK(m[1].rule->cost == 10);
	/* methods compare case-insensitively; PUT was written "put" */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "PUT", "/api/upload/2", "10.1.1.1",
					"x-api-key", "k1", NULL)
					  ->r,
				 m, 4) == 2);
	/* other methods do not match */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/api/upload", "10.1.1.1",
					"x-api-key", "k1", NULL)
					  ->r,
				 m, 4) == 1);
	/* the query string is not part of the path */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "POST", "/api/upload?x=/y",
					"10.1.1.1", "x-api-key", "k1", NULL)
					  ->r,
				 m, 4) == 2);
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "POST", "/api/x?/api/upload",
					"10.1.1.1", "x-api-key", "k1", NULL)
					  ->r,
				 m, 4) == 1);
	/* max caps the answer */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "POST", "/api/upload", "10.1.1.1",
					"x-api-key", "k1", NULL)
					  ->r,
				 m, 1) == 1);
	sluice_config_free(c);
}

/* One row of tests/data/path_spellings.tsv: a target, nginx's $uri for
 * it ("400": refused), Caddy's routing and whether the rule is charged. */
typedef struct spelling_s {
	char target[256], nginx[256], caddy[16], charged[8];
} spelling_t;

static int next_spelling(FILE *f, spelling_t *sp)
{
	char line[1024];

	while (fgets(line, sizeof(line), f)) {
		char *fields[4], *p = line;
		size_t k;

		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		for (k = 0; k < 4; k++) {
			fields[k] = p;
			p = strchr(p, '\t');
			if (!p && k < 3) {
				fprintf(stderr, "bad row: %s\n", line);
				exit(1);
			}
			if (p)
				*p++ = '\0';
		}
		snprintf(sp->target, sizeof(sp->target), "%s", fields[0]);
		snprintf(sp->nginx, sizeof(sp->nginx), "%s", fields[1]);
		snprintf(sp->caddy, sizeof(sp->caddy), "%s", fields[2]);
		snprintf(sp->charged, sizeof(sp->charged), "%s", fields[3]);
		return 1;
	}
	return 0;
}

static void test_every_spelling_routers_route_meets_the_rule(void)
{
	sluice_config_t *c = load("rules:\n"
				  "  - name: up\n"
				  "    match: {path: \"/api/upload\"}\n"
				  "    limits: [{capacity: 1, rate: 1/s}]\n");
	FILE *f = fopen(SLUICE_PATH_SPELLINGS, "r");
	spelling_t sp;
	sluice_match_t m[4];
	req_t q;
	size_t rows = 0, charged = 0, k;

	CHECK(f != NULL);
	if (!f)
		return;
	while (next_spelling(f, &sp)) {
		sluice_path_readings_t pr;
		size_t n = sluice_rules_match(
			c, &mkreq(&q, "POST", sp.target, "10.0.0.1", NULL)->r,
			m, 4);
		int want = strcmp(sp.charged, "yes") == 0;

		/* charged once however many readings meet the rule */
		if (n != (size_t)want)
			fprintf(stderr, "%s: %zu matches, want %d\n", sp.target,
				n, want);
		CHECK(n == (size_t)want);
		CHECK(want || strcmp(sp.charged, "no") == 0);
		charged += (size_t)want;
		rows++;
		/* nginx's own $uri is one of sluice's readings */
		if (strcmp(sp.nginx, "400") == 0)
			continue;
		sluice_path_readings(sp.target, strlen(sp.target), &pr);
		for (k = 0; k < pr.n; k++)
			if (pr.len[k] == strlen(sp.nginx) &&
			    memcmp(pr.p[k], sp.nginx, pr.len[k]) == 0)
				break;
		if (k == pr.n)
			fprintf(stderr, "%s: nginx's %s is no reading\n",
				sp.target, sp.nginx);
		CHECK(k < pr.n);
		sluice_path_readings_free(&pr);
	}
	fclose(f);
	CHECK(rows > 40 && charged > 20 && rows - charged > 10);
	sluice_config_free(c);
}

static void test_long_paths_are_read_on_the_heap(void)
{
	sluice_config_t *c = load("rules:\n"
				  "  - name: up\n"
				  "    match: {path: \"/api/upload\"}\n"
				  "    limits: [{capacity: 1, rate: 1/s}]\n");
	sluice_match_t m[1];
	req_t q;
	size_t i;
	char big[6000];

	memset(big, 0, sizeof(big));
	for (i = 0; i + 2 < 5000; i += 2)
		memcpy(big + i, "/.", 2);
	strcat(big, "/API/upload/");
	CHECK(sluice_rules_match(c, &mkreq(&q, "GET", big, "10.0.0.1", NULL)->r,
				 m, 1) == 1);
	sluice_config_free(c);
}

/* Express matches routes on the raw path and Fastify on the decoded one,
 * neither resolving dot segments: "/files/../x/meta" is the handler of
 * "/files/:id/meta" with id "..", though nginx's $uri is "/x/meta". */
static void test_unresolved_readings_meet_globs(void)
{
	sluice_config_t *c = load("rules:\n"
				  "  - name: meta\n"
				  "    match: {path: \"/files/*/meta\"}\n"
				  "    limits: [{capacity: 1, rate: 1/s}]\n"
				  "  - name: x\n"
				  "    match: {path: \"/x/*\"}\n"
				  "    limits: [{capacity: 1, rate: 1/s}]\n");
	sluice_match_t m[4];
	req_t q;

	CHECK(sluice_rules_match(
		      c,
		      &mkreq(&q, "GET", "/files/../meta", "10.0.0.1", NULL)->r,
		      m, 4) == 1);
	CHECK(strcmp(m[0].rule->name, "meta") == 0);
	/* Fastify: decoded, not resolved; nginx: "/x/meta" */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/files/%2e%2e/x/%6deta",
					"10.0.0.1", NULL)
					  ->r,
				 m, 4) == 2);
	sluice_config_free(c);
}

static size_t matches(const sluice_config_t *c, const char *method,
		      const char *path)
{
	sluice_match_t m[4];
	req_t q;

	return sluice_rules_match(
		c, &mkreq(&q, method, path, "10.0.0.1", NULL)->r, m, 4);
}

static void test_globs_get_the_same_spellings(void)
{
	sluice_config_t *c = load("rules:\n"
				  "  - name: files\n"
				  "    match: {path: \"/files/*/meta/\"}\n"
				  "    limits: [{capacity: 1, rate: 1/s}]\n"
				  "  - name: api\n"
				  "    match: {path: \"/api/*\"}\n"
				  "    limits: [{capacity: 1, rate: 1/s}]\n");

	/* the pattern's trailing slash is optional like the request's */
	CHECK(matches(c, "GET", "/files/a/meta") == 1);
	CHECK(matches(c, "GET", "/files/a/meta/") == 1);
	CHECK(matches(c, "GET", "/FILES/a/Meta") == 1);
	CHECK(matches(c, "GET", "/files/a/metadata") == 0);
	CHECK(matches(c, "GET", "/API/v1/Users/") == 1);
	CHECK(matches(c, "GET", "/Api/") == 1);
	CHECK(matches(c, "GET", "/api") == 0);
	sluice_config_free(c);
}

static void test_exact_matching_is_per_rule(void)
{
	sluice_config_t *c =
		load("rules:\n"
		     "  - name: cs\n"
		     "    match: {path: \"/Api/Upload\", case_sensitive: "
		     "true}\n"
		     "    limits: [{capacity: 1, rate: 1/s}]\n"
		     "  - name: strict\n"
		     "    match: {path: \"/dir/\", strict_slash: true}\n"
		     "    limits: [{capacity: 1, rate: 1/s}]\n"
		     "  - name: exact\n"
		     "    match: {path: \"/x/*\", case_sensitive: true,\n"
		     "            strict_slash: true}\n"
		     "    limits: [{capacity: 1, rate: 1/s}]\n");

	CHECK(c->rules[0].path_case_sensitive &&
	      !c->rules[0].path_strict_slash);
	CHECK(!c->rules[1].path_case_sensitive &&
	      c->rules[1].path_strict_slash);
	CHECK(strcmp(c->rules[1].path, "/dir/") == 0);
	CHECK(matches(c, "GET", "/Api/Upload") == 1);
	CHECK(matches(c, "GET", "/Api/Upload/") == 1); /* the slash still */
	CHECK(matches(c, "GET", "/api/upload") == 0);
	CHECK(matches(c, "GET", "/dir/") == 1);
	CHECK(matches(c, "GET", "/DIR/") == 1); /* the case still */
	CHECK(matches(c, "GET", "/dir") == 0);
	CHECK(matches(c, "GET", "/x/a") == 1);
	CHECK(matches(c, "GET", "/x/a/") == 1); /* '*' takes the slash */
	CHECK(matches(c, "GET", "/X/a") == 0);
	/* normalisation is not optional: no router would tell these apart
	 * (and Express routes the raw path to the "/x/" glob too) */
	CHECK(matches(c, "GET", "/x/../Api/%55pload") == 2);
	CHECK(matches(c, "GET", "/y/../Api/%55pload") == 1);
	sluice_config_free(c);
}

static void test_get_rules_cover_head(void)
{
	sluice_config_t *c =
		load("rules:\n"
		     "  - name: search\n"
		     "    match: {methods: [get], path: /search}\n"
		     "    limits: [{capacity: 1, rate: 1/s}]\n"
		     "  - name: write\n"
		     "    match: {methods: [POST], path: /search}\n"
		     "    limits: [{capacity: 1, rate: 1/s}]\n");

	CHECK(matches(c, "GET", "/search") == 1);
	/* Express answers HEAD with the GET handler */
	CHECK(matches(c, "HEAD", "/search") == 1);
	CHECK(matches(c, "head", "/search") == 1);
	CHECK(matches(c, "POST", "/search") == 1);
	CHECK(matches(c, "OPTIONS", "/search") == 0);
	CHECK(matches(c, "HEA", "/search") == 0);
	sluice_config_free(c);
}

static void test_composite_keys_need_every_part(void)
{
	sluice_config_t *c = load(two_rules);
	sluice_match_t m[4];
	req_t q;

	sluice_rules_match(c,
			   &mkreq(&q, "POST", "/api/upload", "10.1.1.1",
				  "x-api-key", "k1", NULL)
				    ->r,
			   m, 4);
	CHECK(key_is(&m[1], "upload",
		     "k1\x1f"
		     "10.1.1.1"));
	/* same key from another address: another bucket */
	sluice_rules_match(c,
			   &mkreq(&q, "POST", "/api/upload", "10.1.1.2",
				  "x-api-key", "k1", NULL)
				    ->r,
			   m, 4);
	CHECK(key_is(&m[1], "upload",
		     "k1\x1f"
		     "10.1.1.2"));
	/* no API key: the composite is empty, nobody to charge for upload */
	CHECK(sluice_rules_match(
		      c, &mkreq(&q, "POST", "/api/upload", "10.1.1.1", NULL)->r,
		      m, 4) == 1);
	CHECK(strcmp(m[0].rule->name, "api") == 0);
	/* a rule whose only source is missing is skipped */
	CHECK(sluice_rules_match(
		      c, &mkreq(&q, "GET", "/partner/x", "10.1.1.1", NULL)->r,
		      m, 4) == 1);
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/partner/x", "10.1.1.1",
					"x-partner", "acme", NULL)
					  ->r,
				 m, 4) == 2);
	CHECK(key_is(&m[1], "partner", "acme"));
	sluice_config_free(c);
}

static void test_long_or_binary_values_are_hashed(void)
{
	sluice_config_t *c = sluice_config_default();
	sluice_match_t m1[1], m2[1];
	char v1[1000], v2[1000];
	req_t q;
	size_t i;

	memset(v1, 'A', sizeof(v1) - 1);
	v1[sizeof(v1) - 1] = '\0';
	memcpy(v2, v1, sizeof(v1));
	v2[sizeof(v2) - 2] = 'B'; /* differs only at the end */
	sluice_rules_match(
		c, &mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", v1, NULL)->r,
		m1, 1);
	sluice_rules_match(
		c, &mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", v2, NULL)->r,
		m2, 1);
	CHECK(m1[0].keylen == strlen("default") + 1 + 1 + 64);
	CHECK(memcmp(m1[0].key, "default\x1f~", 9) == 0);
	for (i = 9; i < m1[0].keylen; i++)
		CHECK(strchr("0123456789abcdef", m1[0].key[i]) != NULL);
	CHECK(m1[0].keylen == m2[0].keylen &&
	      memcmp(m1[0].key, m2[0].key, m1[0].keylen) != 0);
	/* 200 bytes is kept verbatim, 201 is hashed */
	v1[200] = '\0';
	sluice_rules_match(
		c, &mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", v1, NULL)->r,
		m1, 1);
	CHECK(key_is(&m1[0], "default", v1));
	v1[200] = 'A';
	v1[201] = '\0';
	sluice_rules_match(
		c, &mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", v1, NULL)->r,
		m1, 1);
	CHECK(m1[0].key[8] == '~');
	/* a value holding the composite separator is no identity part (HTTP
	 * forbids it; only a caller building requests itself can pass one):
	 * the next source, the address, decides */
	sluice_rules_match(c,
			   &mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id",
				  "a\x1f"
				  "b",
				  NULL)
				    ->r,
			   m1, 1);
	CHECK(key_is(&m1[0], "default", "10.0.0.1"));
	sluice_config_free(c);
}

/* sluice_key_make() is one-to-one: an identity that is the encoding of
 * another ("~" and the hex SHA-256 of a long or binary identity) gets a
 * bucket of its own, as does every long or binary identity. */
static void test_no_identity_poses_as_another(void)
{
	static const char hex[] = "0123456789abcdef";
	char victim[300], forged[80], k1[SLUICE_KEY_MAX], k2[SLUICE_KEY_MAX];
	const char *const victims[] = {victim, "a\tb", "x\x7f", "~"};
	const void *part;
	size_t len, n1, n2, i, j;
	uint8_t d[32];

	memset(victim, 'v', sizeof(victim) - 1);
	victim[sizeof(victim) - 1] = '\0';
	for (i = 0; i < sizeof(victims) / sizeof(victims[0]); i++) {
		part = victims[i];
		len = strlen(victims[i]);
		n1 = sluice_key_make("api", &part, &len, 1, k1);
		/* what the old rule wrote for a hashed identity */
		sluice_sha256(&part, &len, 1, d);
		forged[0] = '~';
		for (j = 0; j < 32; j++) {
			forged[1 + 2 * j] = hex[d[j] >> 4];
			forged[2 + 2 * j] = hex[d[j] & 15];
		}
		part = forged;
		len = 65;
		n2 = sluice_key_make("api", &part, &len, 1, k2);
		CHECK(n2 == 4 + 65 && k2[4] == '~');
		CHECK(n1 != n2 || memcmp(k1, k2, n1) != 0);
	}
	/* verbatim: short, printable, not starting with '~' (0x1f allowed,
	 * it separates a composite identity's parts) */
	part = "alice\x1f"
	       "10.0.0.1";
	len = 14;
	CHECK(sluice_key_make("api", &part, &len, 1, k1) == 4 + 14);
	CHECK(memcmp(k1,
		     "api\x1f"
		     "alice\x1f"
		     "10.0.0.1",
		     18) == 0);
	part = "a~";
	len = 2;
	CHECK(sluice_key_make("api", &part, &len, 1, k1) == 6);
}

/* A composite identity given as its documented form (parts joined by
 * 0x1f) to /v1/take or the admin API is the bucket /v1/check charges. */
static void test_composite_identity_one_encoding(void)
{
	sluice_config_t *c = load("rules:\n"
				  "  - name: pair\n"
				  "    key: \"header:x-org+header:x-user\"\n"
				  "    limits: [{capacity: 3, rate: 1/min}]\n");
	sluice_match_t m1[1], m2[1];
	req_t q;

	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/", "10.0.0.1", "x-org",
					"acme", "x-user", "ann", NULL)
					  ->r,
				 m1, 1) == 1);
	sluice_rule_key(&c->rules[0],
			"acme\x1f"
			"ann",
			8, m2);
	CHECK(m1[0].keylen == m2[0].keylen &&
	      memcmp(m1[0].key, m2[0].key, m1[0].keylen) == 0);
	sluice_config_free(c);
}

static void test_rule_key_matches_request_keys(void)
{
	sluice_config_t *c = sluice_config_default();
	sluice_match_t m1[1], m2[1];
	char v[300];
	req_t q;

	/* /v1/take builds its keys with sluice_rule_key(): same bucket */
	sluice_rules_match(
		c,
		&mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", "ann", NULL)->r,
		m1, 1);
	sluice_rule_key(&c->rules[0], "ann", 3, m2);
	CHECK(m1[0].keylen == m2[0].keylen &&
	      memcmp(m1[0].key, m2[0].key, m1[0].keylen) == 0);
	memset(v, 'z', sizeof(v) - 1);
	v[sizeof(v) - 1] = '\0';
	sluice_rules_match(
		c, &mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", v, NULL)->r,
		m1, 1);
	sluice_rule_key(&c->rules[0], v, strlen(v), m2);
	CHECK(m1[0].keylen == 8 + 65 && m1[0].keylen == m2[0].keylen &&
	      memcmp(m1[0].key, m2[0].key, m1[0].keylen) == 0);
	sluice_config_free(c);
}

/* --------------------------------------------------------------- tiers */

static void test_tiers_follow_the_header(void)
{
	sluice_config_t *c =
		load("rules:\n"
		     "  - name: plan\n"
		     "    key: [\"header:x-user-id\"]\n"
		     "    tiers:\n"
		     "      header: X-User-Tier\n"
		     "      default: anonymous\n"
		     "      limits:\n"
		     "        authenticated: [{capacity: 200, rate: 200/min}]\n"
		     "        anonymous: [{capacity: 50, rate: 50/min}]\n"
		     "        paid: [{capacity: 2000, rate: 2000/min}]\n");
	sluice_match_t m[1];
	req_t q;

	sluice_rules_match(c,
			   &mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", "u",
				  "x-user-tier", "paid", NULL)
				    ->r,
			   m, 1);
	CHECK(strcmp(m[0].set->name, "paid") == 0);
	CHECK(m[0].set->limits[0].capacity == 2000);
	sluice_rules_match(c,
			   &mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", "u",
				  "x-user-tier", "Authenticated", NULL)
				    ->r,
			   m, 1);
	CHECK(strcmp(m[0].set->name, "authenticated") == 0);
	/* unknown or absent: the default tier */
	sluice_rules_match(c,
			   &mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", "u",
				  "x-user-tier", "platinum", NULL)
				    ->r,
			   m, 1);
	CHECK(strcmp(m[0].set->name, "anonymous") == 0);
	sluice_rules_match(
		c,
		&mkreq(&q, "GET", "/", "10.0.0.1", "x-user-id", "u", NULL)->r,
		m, 1);
	CHECK(strcmp(m[0].set->name, "anonymous") == 0);
	CHECK(m[0].set->limits[0].capacity == 50);
	/* the same choice by name, for /v1/take */
	CHECK(strcmp(sluice_rule_tier(&c->rules[0], "PAID", 4)->name, "paid") ==
	      0);
	CHECK(strcmp(sluice_rule_tier(&c->rules[0], NULL, 0)->name,
		     "anonymous") == 0);
	sluice_config_free(c);
}

/* ------------------------------------------------- repeated header lines */

static void test_forwarded_for_lines_are_one_list(void)
{
	sluice_config_t *c = load("trusted_proxies: [127.0.0.1/32, "
				  "10.0.0.0/8]\n");
	req_t q;

	/* a client's own line first, the proxy's (HAProxy option
	 * forwardfor adds a line) last: the proxy's line names the client */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "127.0.0.1",
					"X-Forwarded-For", "6.6.6.8",
					"X-Forwarded-For", "192.0.2.79", NULL)),
		     "192.0.2.79") == 0);
	/* the walk goes on into earlier lines past trusted hops */
	CHECK(strcmp(client_ip(c,
			       mkreq(&q, "GET", "/", "127.0.0.1",
				     "X-Forwarded-For", "6.6.6.8, 192.0.2.7",
				     "X-Forwarded-For", "10.0.0.5",
				     "X-Forwarded-For", " 10.0.0.6 , ", NULL)),
		     "192.0.2.7") == 0);
	/* an empty line is no entry */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "127.0.0.1",
					"X-Forwarded-For", "192.0.2.9",
					"X-Forwarded-For", "", NULL)),
		     "192.0.2.9") == 0);
	/* a bad entry in a later line stops the walk there */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "127.0.0.1",
					"X-Forwarded-For", "6.6.6.8",
					"X-Forwarded-For", "junk, 10.0.0.7",
					NULL)),
		     "10.0.0.7") == 0);
	/* two X-Real-IP lines: neither is used, X-Forwarded-For decides */
	CHECK(strcmp(client_ip(c,
			       mkreq(&q, "GET", "/", "127.0.0.1", "X-Real-IP",
				     "6.6.6.8", "X-Real-IP", "192.0.2.79",
				     "X-Forwarded-For", "192.0.2.80", NULL)),
		     "192.0.2.80") == 0);
	/* ... or the peer */
	CHECK(strcmp(client_ip(c,
			       mkreq(&q, "GET", "/", "127.0.0.1", "X-Real-IP",
				     "6.6.6.8", "X-Real-IP", "6.6.6.8", NULL)),
		     "127.0.0.1") == 0);
	sluice_config_free(c);
}

static void test_repeated_identity_headers_are_not_used(void)
{
	sluice_config_t *c =
		load("rules:\n"
		     "  - name: user\n"
		     "    key: [\"header:x-user-id\", ip]\n"
		     "    tiers:\n"
		     "      header: x-user-tier\n"
		     "      default: free\n"
		     "      limits:\n"
		     "        free: [{capacity: 5, rate: 1/min}]\n"
		     "        paid: [{capacity: 500, rate: 1/s}]\n"
		     "  - name: partner\n"
		     "    key: \"header:x-api-key+header:x-user-id\"\n"
		     "    limits: [{capacity: 5, rate: 1/min}]\n");
	sluice_match_t m[4];
	req_t q;

	/* one line: the value */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/", "192.0.2.1",
					"x-user-id", "victim", "x-user-tier",
					"paid", NULL)
					  ->r,
				 m, 4) == 1);
	CHECK(key_is(&m[0], "user", "victim"));
	CHECK(strcmp(m[0].set->name, "paid") == 0);
	/* two lines: whichever a proxy put first, the client does not pick
	 * the bucket (nor the tier): the header counts as absent */
	CHECK(sluice_rules_match(
		      c,
		      &mkreq(&q, "GET", "/", "192.0.2.1", "x-user-id", "victim",
			     "x-user-id", "me", "x-user-tier", "paid",
			     "x-user-tier", "free", "x-api-key", "k", NULL)
			       ->r,
		      m, 4) == 1);
	CHECK(key_is(&m[0], "user", "192.0.2.1"));
	CHECK(strcmp(m[0].set->name, "free") == 0);
	/* even the same value twice */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/", "192.0.2.1",
					"x-user-id", "me", "x-user-id", "me",
					NULL)
					  ->r,
				 m, 4) == 1);
	CHECK(key_is(&m[0], "user", "192.0.2.1"));
	/* a composite with a repeated part is empty: not charged by it */
	CHECK(sluice_rules_match(c,
				 &mkreq(&q, "GET", "/", "192.0.2.1",
					"x-api-key", "k", "x-user-id", "u",
					NULL)
					  ->r,
				 m, 4) == 2);
	CHECK(key_is(&m[1], "partner", "k\x1fu"));
	sluice_config_free(c);
}

/* ----------------------------------------------------------- client IP */

static void test_untrusted_peer_cannot_spoof(void)
{
	sluice_config_t *c = sluice_config_default(); /* trusts loopback */
	req_t q;

	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "198.51.100.7",
					"X-Forwarded-For", "1.2.3.4",
					"X-Real-IP", "5.6.7.8", NULL)),
		     "198.51.100.7") == 0);
	sluice_config_free(c);
}

static void test_trusted_proxy_headers(void)
{
	sluice_config_t *c = load("trusted_proxies: [127.0.0.1/32, "
				  "10.0.0.0/8, \"::1/128\"]\n");
	req_t q;

	/* X-Real-IP first */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "127.0.0.1",
					"X-Real-IP", "203.0.113.5",
					"X-Forwarded-For", "1.1.1.1", NULL)),
		     "203.0.113.5") == 0);
	/* else the right-most X-Forwarded-For entry that is not a proxy:
	 * the client prepended a fake 6.6.6.6, our proxies appended the
	 * rest */
	CHECK(strcmp(client_ip(c,
			       mkreq(&q, "GET", "/", "127.0.0.1",
				     "X-Forwarded-For",
				     "6.6.6.6, 203.0.113.5, 10.0.0.2", NULL)),
		     "203.0.113.5") == 0);
	/* all proxies: the left-most */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "127.0.0.1",
					"X-Forwarded-For", "10.0.0.9,10.0.0.2",
					NULL)),
		     "10.0.0.9") == 0);
	/* a malformed entry stops the walk at the last good hop */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "127.0.0.1",
					"X-Forwarded-For",
					"1.1.1.1, junk, "
					"10.0.0.3",
					NULL)),
		     "10.0.0.3") == 0);
	/* garbage everywhere: the peer */
	CHECK(strcmp(client_ip(c,
			       mkreq(&q, "GET", "/", "127.0.0.1", "X-Real-IP",
				     "nope", "X-Forwarded-For", "junk", NULL)),
		     "127.0.0.1") == 0);
	/* ports and brackets are tolerated */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "127.0.0.1",
					"X-Forwarded-For", "203.0.113.5:4711",
					NULL)),
		     "203.0.113.5") == 0);
	CHECK(strcmp(client_ip(c,
			       mkreq(&q, "GET", "/", "::1", "X-Forwarded-For",
				     "[2001:db8:aa:bb::1]:443", NULL)),
		     "2001:db8:aa:bb::/64") == 0);
	/* no headers: the proxy itself */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "10.2.3.4", NULL)),
		     "10.2.3.4") == 0);
	sluice_config_free(c);
}

static void test_ipv6_grouping_and_mapped_ipv4(void)
{
	sluice_config_t *c = sluice_config_default();
	sluice_config_t *c56 = load("ipv6_prefix: 56\n");
	sluice_config_t *c128 = load("ipv6_prefix: 128\n");
	sluice_match_t m1[1], m2[1];
	req_t q;

	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "2001:db8:1:2:a:b:c:d",
					NULL)),
		     "2001:db8:1:2::/64") == 0);
	CHECK(strcmp(client_ip(c56, mkreq(&q, "GET", "/",
					  "2001:db8:1:2ff:a:b:c:d", NULL)),
		     "2001:db8:1:200::/56") == 0);
	CHECK(strcmp(client_ip(c128, mkreq(&q, "GET", "/",
					   "2001:db8:1:2:a:b:c:d", NULL)),
		     "2001:db8:1:2:a:b:c:d") == 0);
	/* two addresses of one /64 share a bucket; the next /64 does not */
	sluice_rules_match(
		c, &mkreq(&q, "GET", "/", "2001:db8:1:2::1", NULL)->r, m1, 1);
	sluice_rules_match(
		c, &mkreq(&q, "GET", "/", "2001:db8:1:2:ffff::9", NULL)->r, m2,
		1);
	CHECK(m1[0].keylen == m2[0].keylen &&
	      memcmp(m1[0].key, m2[0].key, m1[0].keylen) == 0);
	sluice_rules_match(
		c, &mkreq(&q, "GET", "/", "2001:db8:1:3::1", NULL)->r, m2, 1);
	CHECK(memcmp(m1[0].key, m2[0].key, m1[0].keylen) != 0);
	/* an IPv4-mapped peer is an IPv4 client, and a trusted one */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "::ffff:198.51.100.7",
					NULL)),
		     "198.51.100.7") == 0);
	CHECK(strcmp(client_ip(c,
			       mkreq(&q, "GET", "/", "::ffff:127.0.0.1",
				     "X-Real-IP", "::ffff:203.0.113.1", NULL)),
		     "203.0.113.1") == 0);
	/* ::1 is trusted by default */
	CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "::1", "X-Real-IP",
					"2001:db8::7", NULL)),
		     "2001:db8::/64") == 0);
	sluice_config_free(c);
	sluice_config_free(c56);
	sluice_config_free(c128);
}

static void test_no_peer_means_no_ip(void)
{
	sluice_config_t *c = sluice_config_default();
	sluice_match_t m[1];
	req_t q;
	char buf[64];

	mkreq(&q, "GET", "/", "10.0.0.1", NULL);
	q.r.peer = NULL;
	CHECK(sluice_client_ip(c, &q.r, buf, sizeof(buf)) == 0);
	CHECK(sluice_rules_match(c, &q.r, m, 1) == 0);
	/* a buffer too small gives 0, not a truncated address */
	mkreq(&q, "GET", "/", "2001:db8:1:2::1", NULL);
	CHECK(sluice_client_ip(c, &q.r, buf, 8) == 0);
	sluice_config_free(c);
}

/*
 * tests/unit/client_addresses.tsv: every spelling of a client address and
 * its bucket key, the table the Node package's tests check too (its
 * default key calls the same parser through the addon).  Each row as
 * serve meets it: sluice_addr_parse() + sluice_addr_key() directly, and
 * as X-Real-IP from a trusted proxy (a row that is no address leaves the
 * proxy's own address, as an entry that does not parse stops the walk).
 */
static void test_client_addresses_table(void)
{
	FILE *f = fopen(SLUICE_SRC_DIR "/tests/unit/client_addresses.tsv", "r");
	char line[256];
	int rows = 0;

	CHECK(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		char *addr = line, *t1, *t2, *want, text[128], cfgtext[128];
		sluice_addr_t ad;
		sluice_config_t *c;
		unsigned prefix;
		req_t q;
		size_t n;

		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		t1 = strchr(line, '\t');
		t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
		CHECK(t1 && t2);
		*t1 = *t2 = '\0';
		prefix = (unsigned)atoi(t1 + 1);
		want = t2 + 1;
		n = 0;
		if (sluice_addr_parse(addr, strlen(addr), &ad) == 0)
			n = sluice_addr_key(&ad, prefix, text, sizeof(text));
		if (strcmp(n ? text : "-", want) != 0) {
			fprintf(stderr, "\"%s\" /%u: got %s, want %s\n", addr,
				prefix, n ? text : "-", want);
			CHECK(0);
		}
		snprintf(cfgtext, sizeof(cfgtext),
			 "trusted_proxies: [127.0.0.1/32]\nipv6_prefix: %u\n",
			 prefix);
		c = load(cfgtext);
		CHECK(strcmp(client_ip(c, mkreq(&q, "GET", "/", "127.0.0.1",
						"X-Real-IP", addr, NULL)),
			     strcmp(want, "-") == 0 ? "127.0.0.1" : want) == 0);
		sluice_config_free(c);
		rows++;
	}
	fclose(f);
	CHECK(rows >= 20);
}

/* -------------------------------------------------------------- sha256 */

static void hex(const uint8_t d[32], char out[65])
{
	int i;

	for (i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void test_sha256_vectors(void)
{
	static const char
		*abc = "abc",
		*two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmno"
		       "mnopnopq";
	const void *bufs[2];
	size_t lens[2];
	uint8_t d[32];
	char h[65];

	bufs[0] = abc;
	lens[0] = 3;
	sluice_sha256(bufs, lens, 1, d);
	hex(d, h);
	CHECK(strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410f"
			"f61f20015ad") == 0);
	sluice_sha256(bufs, lens, 0, d);
	hex(d, h);
	CHECK(strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca4959"
			"91b7852b855") == 0);
	/* split across buffers: same digest as one buffer */
	bufs[0] = two;
	lens[0] = 10;
	bufs[1] = two + 10;
	lens[1] = strlen(two) - 10;
	sluice_sha256(bufs, lens, 2, d);
	hex(d, h);
	CHECK(strcmp(h,
		     "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd"
		     "419db06c1") == 0);
}

int main(void)
{
	RUN(test_glob);
	RUN(test_client_addresses_table);
	RUN(test_default_rule_keys_user_then_ip);
	RUN(test_methods_paths_and_query_strings);
	RUN(test_every_spelling_routers_route_meets_the_rule);
	RUN(test_long_paths_are_read_on_the_heap);
	RUN(test_unresolved_readings_meet_globs);
	RUN(test_globs_get_the_same_spellings);
	RUN(test_exact_matching_is_per_rule);
	RUN(test_get_rules_cover_head);
	RUN(test_composite_keys_need_every_part);
	RUN(test_long_or_binary_values_are_hashed);
	RUN(test_no_identity_poses_as_another);
	RUN(test_composite_identity_one_encoding);
	RUN(test_rule_key_matches_request_keys);
	RUN(test_tiers_follow_the_header);
	RUN(test_untrusted_peer_cannot_spoof);
	RUN(test_trusted_proxy_headers);
	RUN(test_forwarded_for_lines_are_one_list);
	RUN(test_repeated_identity_headers_are_not_used);
	RUN(test_ipv6_grouping_and_mapped_ipv4);
	RUN(test_no_peer_means_no_ip);
	RUN(test_sha256_vectors);
	TESTS_DONE();
}
