/*
 * test_rules.c -- which buckets a request touches: matching, path globs and
 * store keys (composites, fallbacks, over-long values).  Tiers and the
 * client address behind trusted proxies: test_rules_clients.c.
 */
#include "check.h"
#include "policy/config/config.h"
#include "rules_test.h"
#include "util/addr.h"
#include "util/sha256.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

int main(void)
{
	RUN(test_glob);
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
	TESTS_DONE();
}
