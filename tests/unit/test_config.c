/*
 * test_config.c -- the YAML config: the defaults, every field read, a file
 * loaded and checked, reloads.  Stores (Redis, TLS, Sentinel):
 * test_config_stores.c; bad files: test_config_bad.c.
 */
#include "check.h"
#include "config_test.h"
#include "policy/config/config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ defaults */

static void test_default_is_the_classic_policy(void)
{
	sluice_config_t *c = sluice_config_default();
	const sluice_rule_t *r;

	CHECK(c != NULL);
	CHECK(strcmp(c->listen, "127.0.0.1:8080") == 0);
	CHECK(c->threads == 1);
	CHECK(c->store.kind == SLUICE_STORE_MEMORY);
	CHECK(c->store.max_keys == 1000000);
	CHECK(c->ipv6_prefix == 64);
	CHECK(c->ntrusted == 2);
	CHECK(c->max_header_bytes == 8192 && c->max_body_bytes == 16384);
	CHECK(c->idle_timeout_ms == 30000);
	CHECK(c->nrules == 2);
	r = &c->rules[0];
	CHECK(strcmp(r->name, "default") == 0);
	CHECK(r->nmethods == 0 && r->path == NULL);
	CHECK(r->nsources == 2);
	CHECK(r->sources[0].parts[0].kind == SLUICE_KEY_HEADER);
	CHECK(strcmp(r->sources[0].parts[0].header, "x-user-id") == 0);
	CHECK(r->sources[1].parts[0].kind == SLUICE_KEY_IP);
	CHECK(r->limits.nlimits == 1);
	CHECK(r->limits.limits[0].capacity == 100);
	CHECK(r->limits.limits[0].rate.interval == 500000);
	CHECK(r->limits.limits[0].rate.per == 1);
	CHECK(r->cost == 1 && r->shadow == 0);
	CHECK(r->on_store_error == SLUICE_FAIL_OPEN);
	/* and a ceiling per client address, whatever x-user-id says */
	r = &c->rules[1];
	CHECK(strcmp(r->name, "default-ip") == 0);
	CHECK(r->nmethods == 0 && r->path == NULL);
	CHECK(r->nsources == 1 && r->sources[0].nparts == 1);
	CHECK(r->sources[0].parts[0].kind == SLUICE_KEY_IP);
	CHECK(r->limits.nlimits == 1);
	CHECK(r->limits.limits[0].capacity == 200);
	CHECK(r->limits.limits[0].rate.interval == 250000);
	CHECK(r->cost == 1 && r->shadow == 0);
	sluice_config_free(c);
}

static void test_file_without_rules_gets_the_classic_rule(void)
{
	char err[512];
	sluice_config_t *c = parse("listen: 0.0.0.0:9000\n", err, sizeof(err));

	CHECK(c != NULL);
	if (!c)
		return;
	CHECK(strcmp(c->listen, "0.0.0.0:9000") == 0);
	CHECK(strcmp(c->path, "t.yaml") == 0);
	CHECK(c->nrules == 2 && strcmp(c->rules[0].name, "default") == 0 &&
	      strcmp(c->rules[1].name, "default-ip") == 0);
	CHECK(c->rules[0].limits.limits[0].capacity == 100);
	sluice_config_free(c);
}

/* -------------------------------------------------------- every field */

static const char issue_example[] =
	"listen: 127.0.0.1:8080\n"
	"store: memory                      # later: {redis: ...}\n"
	"trusted_proxies: [127.0.0.1/32, \"::1/128\"]\n"
	"rules:\n"
	"  - name: api\n"
	"    key: [\"header:x-user-id\", \"ip\"]\n"
	"    limits:\n"
	"      - {capacity: 100, rate: 2/s}\n"
	"      - {capacity: 10000, rate: 10000/day}\n"
	"  - name: upload\n"
	"    match: {methods: [POST], path: \"/api/upload\"}\n"
	"    cost: 10\n"
	"    on_store_error: closed\n"
	"    tiers:\n"
	"      header: x-user-tier\n"
	"      default: anonymous\n"
	"      limits:\n"
	"        anonymous: [{capacity: 50, rate: 50/min}]\n"
	"        paid: [{capacity: 2000, rate: 2000/min}]\n";

static void test_issue_example_parses(void)
{
	char err[512];
	sluice_config_t *c = parse(issue_example, err, sizeof(err));
	const sluice_rule_t *api, *up;

	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK(c->nrules == 2);
	api = &c->rules[0];
	up = &c->rules[1];
	CHECK(strcmp(api->name, "api") == 0 && api->line == 5);
	CHECK(api->nsources == 2);
	CHECK(api->limits.nlimits == 2);
	CHECK(api->limits.limits[1].capacity == 10000);
	CHECK(api->limits.limits[1].rate.interval == 8640000);
	CHECK(strcmp(up->name, "upload") == 0 && up->line == 10);
	CHECK(up->nmethods == 1 && strcmp(up->methods[0], "POST") == 0);
	CHECK(strcmp(up->path, "/api/upload") == 0);
	CHECK(up->cost == 10);
	CHECK(up->on_store_error == SLUICE_FAIL_CLOSED);
	CHECK(up->ntiers == 2);
	CHECK(strcmp(up->tier_header, "x-user-tier") == 0);
	CHECK(strcmp(up->tiers[up->default_tier].name, "anonymous") == 0);
	CHECK(strcmp(up->tiers[1].name, "paid") == 0);
	CHECK(up->tiers[1].limits[0].capacity == 2000);
	CHECK(up->nsources == 1 &&
	      up->sources[0].parts[0].kind == SLUICE_KEY_IP); /* default key */
	sluice_config_free(c);
}

static void test_every_top_level_field(void)
{
	static const char text[] =
		"listen: \"[::1]:9090\"\n"
		"threads: 4\n"
		"store: {memory: {max_keys: 1_000}}\n"
		"trusted_proxies: [10.0.0.0/8, 192.0.2.7, \"fd00::/8\",\n"
		"                  \"::ffff:172.16.0.0/108\"]\n"
		"ipv6_prefix: 56\n"
		"http: {max_header_bytes: 4096, max_body_bytes: 1024,\n"
		"       idle_timeout_ms: 5000}\n"
		"rules:\n"
		"  - name: all\n"
		"    match: {methods: get, path: \"/v?/*\"}\n"
		"    key: \"header:X-Api-Key+ip\"\n"
		"    limits: [{capacity: 5, rate: \"0.5/s\"}]\n"
		"    on_store_error: local\n"
		"    shadow: true\n";
	char err[512];
	sluice_config_t *c = parse(text, err, sizeof(err));
	const sluice_rule_t *r;
	uint8_t a[16];

	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s\n", err);
		return;
	}
	CHECK(strcmp(c->listen, "[::1]:9090") == 0);
	CHECK(c->threads == 4);
	CHECK(c->store.kind == SLUICE_STORE_MEMORY &&
	      c->store.max_keys == 1000);
	CHECK(c->ntrusted == 4);
	CHECK(c->trusted_proxies[0].family == AF_INET);
	CHECK(c->trusted_proxies[0].prefix == 8);
	CHECK(c->trusted_proxies[1].prefix == 32);
	inet_pton(AF_INET, "192.0.2.7", a);
	CHECK(memcmp(c->trusted_proxies[1].addr, a, 4) == 0);
	CHECK(c->trusted_proxies[2].family == AF_INET6);
	CHECK(c->trusted_proxies[2].prefix == 8);
	/* an IPv4-mapped block is an IPv4 block */
	CHECK(c->trusted_proxies[3].family == AF_INET);
	CHECK(c->trusted_proxies[3].prefix == 12);
	CHECK(c->ipv6_prefix == 56);
	CHECK(c->max_header_bytes == 4096 && c->max_body_bytes == 1024);
	CHECK(c->idle_timeout_ms == 5000);
	r = &c->rules[0];
	CHECK(r->nmethods == 1 && strcmp(r->methods[0], "GET") == 0);
	CHECK(strcmp(r->path, "/v?/*") == 0);
	CHECK(r->nsources == 1 && r->sources[0].nparts == 2);
	CHECK(strcmp(r->sources[0].parts[0].header, "x-api-key") == 0);
	CHECK(r->sources[0].parts[1].kind == SLUICE_KEY_IP);
	CHECK(r->limits.limits[0].rate.interval == 2000000);
	CHECK(r->on_store_error == SLUICE_FAIL_LOCAL);
	CHECK(r->shadow == 1);
	sluice_config_free(c);
}

/* proxy: picks the one pair of headers /v1/check reads. */
static void test_proxy_names_the_headers_read(void)
{
	static const struct {
		const char *yaml, *method, *uri;
	} cases[] = {
		{"threads: 1\n", "x-original-method", "x-original-uri"},
		{"proxy: nginx\n", "x-original-method", "x-original-uri"},
		{"proxy: forward_auth\n", "x-forwarded-method",
		 "x-forwarded-uri"},
		{"proxy: envoy\n", NULL, NULL},
		{"proxy: {method_header: X-Orig-M, uri_header: x-orig-u}\n",
		 "x-orig-m", "x-orig-u"},
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[256];
		sluice_config_t *c = sluice_config_parse(
			"t.yaml", cases[i].yaml, strlen(cases[i].yaml), err,
			sizeof(err));
		const char *m, *u;

		CHECK(c != NULL);
		sluice_config_proxy_headers(c, &m, &u);
		CHECK(m == cases[i].method ||
		      (m && cases[i].method &&
		       strcmp(m, cases[i].method) == 0));
		CHECK(u == cases[i].uri ||
		      (u && cases[i].uri && strcmp(u, cases[i].uri) == 0));
		sluice_config_free(c);
	}
}

static void test_empty_trusted_proxies_trusts_nobody(void)
{
	char err[512];
	sluice_config_t *c = parse("trusted_proxies: []\n", err, sizeof(err));

	CHECK(c != NULL && c->ntrusted == 0);
	sluice_config_free(c);
}

static void test_load_reads_a_file_and_names_it(void)
{
	char path[] = "/tmp/sluice-test-config-XXXXXX";
	char err[512];
	sluice_config_t *c;
	FILE *f;

	write_temp(path, "rules:\n  - name: a\n    limits: [{capacity: 1, "
			 "rate: 1/x}]\n");
	c = sluice_config_load(path, err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strncmp(err, path, strlen(path)) == 0);
	CHECK(strstr(err, ":3: ") != NULL);
	f = fopen(path, "w");
	fputs(issue_example, f);
	fclose(f);
	c = sluice_config_load(path, err, sizeof(err));
	CHECK(c != NULL && c->nrules == 2);
	CHECK(c && strcmp(c->path, path) == 0);
	sluice_config_free(c);
	unlink(path);
	c = sluice_config_load(path, err, sizeof(err));
	CHECK(c == NULL && strstr(err, "cannot be opened") != NULL);
}

/* Reading on after errors must not trip over what failed: a rule with no
 * name, duplicate names, a cost beside broken limits. */
static void test_check_reads_on_after_errors(void)
{
	static const char text[] =
		"threads: many\n"			   /* 1 */
		"rules:\n"				   /* 2 */
		"  - limits: [{capacity: 1, rate: 1/s}]\n" /* 3 no name */
		"  - name: a\n"				   /* 4 */
		"    limits: [{capacity: 1, rate: 1/x}]\n" /* 5 */
		"    cost: 5\n"				   /* 6 unchecked */
		"  - name: a\n"				   /* 7 dup */
		"    limits: [{capacity: 1, rate: 1/s}]\n"
		"  - name: b\n"
		"    limits: nope\n"	       /* 10 */
		"    on_store_error: maybe\n"; /* 11 */
	char path[] = "/tmp/sluice-test-config-XXXXXX";
	char report[4096], err[512];

	write_temp(path, text);
	CHECK(sluice_config_check(path, report, sizeof(report), 20) == 6);
	CHECK(strstr(report, ":1: threads") != NULL);
	CHECK(strstr(report, ":3: rules[0] has no name") != NULL);
	CHECK(strstr(report, ":5: ") != NULL);
	CHECK(strstr(report, ":6: ") == NULL);
	CHECK(strstr(report, ":7: rule name \"a\" is used twice") != NULL);
	CHECK(strstr(report, ":10: ") != NULL);
	CHECK(strstr(report, ":11: ") != NULL);
	/* At most max_errors lines, every error counted. */
	CHECK(sluice_config_check(path, report, sizeof(report), 2) == 6);
	CHECK(strchr(strchr(report, '\n') + 1, '\n')[1] == '\0');
	/* The first error is what sluice_config_load() says. */
	CHECK(sluice_config_load(path, err, sizeof(err)) == NULL);
	CHECK(strncmp(report, err, strlen(err)) == 0);
	unlink(path);
	CHECK(sluice_config_check(path, report, sizeof(report), 20) == 1);
	CHECK(strstr(report, "cannot be opened") != NULL);
}

/* 100,000 overrides: every key finds its own limits with a short probe
 * (the table is built at load; lookups stay O(1)). */
static void test_many_overrides_are_found_in_constant_time(void)
{
	const size_t n = 100000;
	size_t cap = 200 + n * 48, len, i;
	char *text = malloc(cap), err[512], key[32];
	const void *bufs[1];
	size_t lens[1];
	const sluice_limit_set_t *set;
	sluice_config_t *c;

	CHECK(text != NULL);
	len = (size_t)snprintf(text, cap,
			       "rules:\n  - name: a\n    key: header:k\n"
			       "    limits: [{capacity: 1, rate: 1/s}]\n"
			       "    overrides:\n");
	for (i = 0; i < n; i++)
		len += (size_t)snprintf(text + len, cap - len,
					"      \"c%zu\": [{capacity: %zu, "
					"rate: 1/s}]\n",
					i, 1 + i % 9);
	c = sluice_config_parse("t.yaml", text, len, err, sizeof(err));
	free(text);
	CHECK(c != NULL);
	if (!c)
		return;
	CHECK(c->rules[0].overrides->n == n);
	/* Shared limit sets: 9 distinct ones, not 100,000 copies. */
	CHECK(c->rules[0].overrides->nsets == 9);
	/* Linear probing at load factor <= 1/2: far below n. */
	CHECK(c->rules[0].overrides->max_probe <= 64);
	for (i = 0; i < n; i += 997) {
		snprintf(key, sizeof(key), "c%zu", i);
		bufs[0] = key;
		lens[0] = strlen(key);
		set = sluice_rule_override(&c->rules[0], bufs, lens, 1);
		CHECK(set && set->limits[0].capacity == 1 + i % 9);
	}
	bufs[0] = "c100000";
	lens[0] = 7;
	CHECK(sluice_rule_override(&c->rules[0], bufs, lens, 1) == NULL);
	sluice_config_free(c);
}

/* examples/sluice.yaml, found next to this source file */
static void test_example_file_is_valid(void)
{
	char path[1024], err[512];
	const char *slash = strrchr(__FILE__, '/');
	sluice_config_t *c;

	snprintf(path, sizeof(path), "%.*s/../../examples/sluice.yaml",
		 slash ? (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".");
	c = sluice_config_load(path, err, sizeof(err));
	if (!c)
		fprintf(stderr, "%s\n", err);
	CHECK(c != NULL);
	CHECK(c->nrules == 2);
	CHECK(c->rules[1].ntiers == 3 && c->rules[1].cost == 10);
	sluice_config_free(c);
}

static void test_listen_parse(void)
{
	struct sockaddr_storage ss;
	char err[256];

	CHECK(sluice_listen_parse("127.0.0.1:8080", &ss, err, sizeof(err)) ==
	      0);
	CHECK(ss.ss_family == AF_INET);
	CHECK(ntohs(((struct sockaddr_in *)&ss)->sin_port) == 8080);
	CHECK(sluice_listen_parse("[::1]:1", &ss, err, sizeof(err)) == 0);
	CHECK(ss.ss_family == AF_INET6);
	CHECK(sluice_listen_parse("::1:80", &ss, err, sizeof(err)) < 0);
	CHECK(sluice_listen_parse("1.2.3.4:", &ss, err, sizeof(err)) < 0);
	CHECK(sluice_listen_parse("1.2.3.4:0", &ss, err, sizeof(err)) < 0);
	CHECK(sluice_listen_parse(":80", &ss, err, sizeof(err)) < 0);
	CHECK(strstr(err, "expected") != NULL);
}

/* A field left 0 (a config made by hand) reads as the documented
 * default (docs/CONFIG.md), the same the file's defaults give: no reader
 * keeps a fallback of its own. */
static void test_zero_fields_read_as_the_documented_defaults(void)
{
	sluice_config_t zero, *d = sluice_config_default();

	CHECK(d != NULL);
	memset(&zero, 0, sizeof(zero));
	CHECK(sluice_config_max_header_bytes(&zero) == 8192);
	CHECK(sluice_config_max_body_bytes(&zero) == 16384);
	CHECK(sluice_config_idle_timeout_ms(&zero) == 30000);
	CHECK(sluice_config_max_keys(&zero) == 1000000);
	CHECK(sluice_config_max_header_bytes(d) == 8192);
	CHECK(sluice_config_max_body_bytes(d) == 16384);
	CHECK(sluice_config_idle_timeout_ms(d) == 30000);
	CHECK(sluice_config_max_keys(d) == 1000000);
	CHECK(d->store.timeout_ms == 50 && d->store.connections == 1);
	sluice_config_free(d);
}

/* What a reload cannot apply: named field by field, the store's settings
 * compared as a whole (a password or a TLS file counts). */
static void test_reload_names_what_needs_a_restart(void)
{
	char err[256], buf[128];
	sluice_config_t *a = parse("store: {redis: {url: \"redis://h:1\", "
				   "timeout_ms: 50}}\n",
				   err, sizeof(err));
	sluice_config_t *b = parse("store: {redis: {url: \"redis://h:1\", "
				   "timeout_ms: 50}}\nthreads: 2\n",
				   err, sizeof(err));
	sluice_config_t *c = parse("store: {redis: {url: \"redis://h:1\", "
				   "timeout_ms: 60}}\n",
				   err, sizeof(err));

	CHECK(a && b && c);
	CHECK(sluice_config_store_same(&a->store, &b->store));
	CHECK(!sluice_config_store_same(&a->store, &c->store));
	CHECK(strcmp(sluice_config_restart_fields(a, a, buf, sizeof(buf)),
		     "") == 0);
	CHECK(strcmp(sluice_config_restart_fields(b, a, buf, sizeof(buf)),
		     "threads") == 0);
	CHECK(strcmp(sluice_config_restart_fields(c, b, buf, sizeof(buf)),
		     "threads, store") == 0);
	CHECK(strcmp(sluice_config_store_name(a), "redis") == 0);
	sluice_config_free(a);
	sluice_config_free(b);
	sluice_config_free(c);
}

/* The running store's name in reload messages and logs is its kind's in
 * store_kinds.def, for every kind: a Redis Cluster is no longer the
 * fallback for any kind not named, and a kind with no row is "unknown". */
static void test_store_names_come_from_the_kinds_table(void)
{
	static const struct {
		const char *yaml, *name;
	} cases[] = {
		{"store: memory\n", "memory"},
		{"store: {shared: {path: /dev/shm/sluice-test}}\n", "shared"},
		{"store: {redis: {url: \"redis://h:1\"}}\n", "redis"},
		{"store: {redis: {sentinel: {master: m, addrs: "
		 "[\"127.0.0.1:26379\"]}}}\n",
		 "redis sentinel"},
		{"store: {redis_cluster: {seeds: [\"127.0.0.1:7000\"]}}\n",
		 "redis cluster"},
	};
	const sluice_store_kind_info_t *info;
	const char *const *names = sluice_store_kind_names();
	char err[256];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sluice_config_t *c = parse(cases[i].yaml, err, sizeof(err));

		CHECK(c != NULL);
		if (!c)
			continue;
		CHECK(strcmp(sluice_config_store_name(c), cases[i].name) == 0);
		c->store.kind = (sluice_store_kind_t)99;
		CHECK(strcmp(sluice_config_store_name(c), "unknown") == 0);
		sluice_config_free(c);
	}
	/* Each row is found by its name and sits at its enum value. */
	for (i = 0; names[i]; i++) {
		info = sluice_store_kind_named(names[i]);
		CHECK(info && (size_t)info->kind == i &&
		      sluice_store_kind_info(info->kind) == info);
	}
	CHECK(i == 4 && !sluice_store_kind_named("redis cluster"));
}

int main(void)
{
	RUN(test_default_is_the_classic_policy);
	RUN(test_store_names_come_from_the_kinds_table);
	RUN(test_zero_fields_read_as_the_documented_defaults);
	RUN(test_reload_names_what_needs_a_restart);
	RUN(test_file_without_rules_gets_the_classic_rule);
	RUN(test_issue_example_parses);
	RUN(test_every_top_level_field);
	RUN(test_empty_trusted_proxies_trusts_nobody);
	RUN(test_proxy_names_the_headers_read);
	RUN(test_check_reads_on_after_errors);
	RUN(test_many_overrides_are_found_in_constant_time);
	RUN(test_load_reads_a_file_and_names_it);
	RUN(test_example_file_is_valid);
	RUN(test_listen_parse);
	TESTS_DONE();
}
