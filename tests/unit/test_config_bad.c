/*
 * test_config_bad.c -- every kind of bad config file is refused with
 * "FILE:LINE: what is wrong; what was expected", nesting too deep and alias
 * bombs early; anchors for shared limits load.
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

/* ------------------------------------------------------------ bad files */

struct bad {
	const char *text;
	int line;
	const char *what; /* a piece of the message */
};

static const struct bad bad_files[] = {
	/* YAML syntax */
	{"rules:\n  - name: a\n    limits: [{capacity: 1, rate: 1/s}\n", 4,
	 "YAML syntax error"},
	{"listen: 1.2.3.4:80\n  threads: 2\n", 2, "YAML syntax error"},
	{"", 1, "the file is empty"},
	{"threads: 1\n---\nthreads: 2\n", 3, "a second YAML document"},
	{"threads: 1\n---\nthreads: [\n", 4, "YAML syntax error"},
	{"- a\n- b\n", 1, "expected a mapping"},
	/* unknown and duplicate keys */
	{"listen: 127.0.0.1:80\nthreds: 2\n", 2,
	 "unknown key \"threds\" (did you mean \"threads\"?)"},
	{"rules:\n  - name: a\n    limits: [{capacity: 1, rate: 1/s}]\n"
	 "    cots: 3\n",
	 4, "unknown key \"cots\""},
	{"rules:\n  - name: a\n    limits: [{capacity: 1, rate: 1/s, "
	 "burst: 3}]\n",
	 3, "unknown key \"burst\""},
	{"threads: 1\nthreads: 2\n", 2, "duplicate key \"threads\""},
	{"store: {memory: {maxkeys: 5}}\n", 1, "unknown key \"maxkeys\""},
	{"http: {max_headers: 5}\n", 1, "unknown key \"max_headers\""},
	/* wrong types and ranges */
	{"threads: many\n", 1, "expected a whole number from 1 to 64"},
	{"threads: 65\n", 1, "out of range"},
	{"threads: 0\n", 1, "out of range"},
	{"threads: [1]\n", 1, "threads is a list; expected a whole number"},
	{"ipv6_prefix: 129\n", 1, "ipv6_prefix"},
	{"rules: {name: a}\n", 1, "rules is a mapping; expected a list"},
	{"rules: []\n", 1, "expected 1 to 1024 rules"},
	{"rules:\n  - name: a\n    limits: [{capacity: 1, rate: 1/s}]\n"
	 "    shadow: maybe\n",
	 4, "expected true or false"},
	{"rules:\n  - name: a\n    limits: [{capacity: 1, rate: 1/s}]\n"
	 "    on_store_error: retry\n",
	 4, "expected open, closed or local"},
	{"listen: localhost\n", 1, "listen address \"localhost\""},
	{"listen: 127.0.0.1:70000\n", 1, "port from 1 to 65535"},
	{"http:\n  max_body_bytes: -5\n", 2, "expected a whole number"},
	/* http-parser's own 80 KiB head limit would apply first */
	{"threads: 1\nhttp:\n  max_header_bytes: 1048576\n", 3,
	 "expected a whole number from 1024 to 65536"},
	/* a body is parsed in one go on the event loop */
	{"http:\n  max_body_bytes: 16777216\n", 2,
	 "expected a whole number from 64 to 65536"},
	{"http: {max_body_bytes: 65537}\n", 1, "from 64 to 65536"},
	/* proxy */
	{"proxy: traefik\n", 1,
	 "proxy \"traefik\" is not a proxy kind; expected nginx, "
	 "forward_auth, envoy or {method_header, uri_header}"},
	{"proxy: {uri_header: x-u}\n", 1,
	 "proxy has no method_header; expected both method_header and "
	 "uri_header"},
	{"proxy: {method_header: x-m, uri_header: \"x u\"}\n", 1,
	 "proxy.uri_header \"x u\" is not a header name"},
	{"proxy: {method_header: X-U, uri_header: x-u}\n", 1,
	 "proxy.uri_header is the same header as method_header"},
	{"proxy: {method_header: x-m, uri_header: x-u, path: p}\n", 1,
	 "unknown key \"path\""},
	/* rates and limits */
	{"rules:\n  - name: a\n    limits:\n"
	 "      - {capacity: 100, rate: 2/fortnight}\n",
	 4, "unknown time unit \"fortnight\"; expected"},
	{"rules:\n  - name: a\n    limits: [{capacity: 100, rate: 0/s}]\n", 3,
	 "is zero"},
	{"rules:\n  - name: a\n    limits: [{capacity: 0, rate: 1/s}]\n", 3,
	 "capacity is 0, out of range"},
	{"rules:\n  - name: a\n    limits: [{rate: 1/s}]\n", 3,
	 "has no capacity"},
	{"rules:\n  - name: a\n    limits: [{capacity: 5}]\n", 3,
	 "has no rate"},
	{"rules:\n  - name: a\n    key: ip\n", 2, "rule \"a\" has no limits"},
	{"rules:\n  - name: a\n    limits: []\n", 3, "has 0 entries"},
	{"rules:\n  - name: a\n    limits:\n"
	 "      - {capacity: 4503599627370496, rate: 1/day}\n",
	 4, "too large for this rate"},
	{"rules:\n  - name: a\n    cost: 10\n"
	 "    limits: [{capacity: 5, rate: 1/s}]\n",
	 3, "cost 10 exceeds the capacity 5"},
	/* names, keys, matches */
	{"rules:\n  - limits: [{capacity: 1, rate: 1/s}]\n", 2,
	 "rules[0] has no name"},
	{"rules:\n  - name: \"a b\"\n    limits: [{capacity: 1, rate: 1/s}]\n",
	 2, "is not valid"},
	{"rules:\n  - name: a\n    limits: [{capacity: 1, rate: 1/s}]\n"
	 "  - name: a\n    limits: [{capacity: 1, rate: 1/s}]\n",
	 4, "rule name \"a\" is used twice (first on line 2)"},
	{"rules:\n  - name: a\n    key: [\"cookie:sid\"]\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3, "is not a key source"},
	{"rules:\n  - name: a\n    key: [\"header:x+\"]\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3, "is not a key source"},
	{"rules:\n  - name: a\n    key: \"ip+ip+ip+ip+ip\"\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3, "joins more than 4 parts"},
	{"rules:\n  - name: a\n    match: {path: api/*}\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3, "is not a path glob"},
	{"rules:\n  - name: a\n    match: {methods: [\"GET /\"]}\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3, "is not an HTTP method"},
	{"rules:\n  - name: a\n    match: {verbs: [GET]}\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3, "unknown key \"verbs\""},
	{"rules:\n  - name: a\n    match: {path: \"/api//up/./x\"}\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3,
	 "never matches: request paths are matched after decoding escapes, "
	 "dropping ;parameters, merging slashes and resolving dot segments; "
	 "expected \"/api/up/x\""},
	{"rules:\n  - name: a\n    match: {path: \"/api;v=2/upload\"}\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3,
	 "never matches: request paths are matched after decoding escapes, "
	 "dropping ;parameters, merging slashes and resolving dot segments; "
	 "expected \"/api/upload\""},
	{"rules:\n  - name: a\n    match: {path: \"/%7Euser/*\"}\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3, "expected \"/~user/*\""},
	{"rules:\n  - name: a\n    match: {case_sensitive: true}\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3, "has case_sensitive or strict_slash but no path"},
	{"rules:\n  - name: a\n    match: {path: /a, strict_slash: maybe}\n"
	 "    limits: [{capacity: 1, rate: 1/s}]\n",
	 3, "match.strict_slash"},
	/* tiers */
	{"rules:\n  - name: a\n    limits: [{capacity: 1, rate: 1/s}]\n"
	 "    tiers: {header: t, default: x, limits: {x: [{capacity: 1, "
	 "rate: 1/s}]}}\n",
	 4, "has both limits and tiers"},
	{"rules:\n  - name: a\n    tiers:\n      header: x-tier\n"
	 "      default: gold\n      limits:\n"
	 "        free: [{capacity: 1, rate: 1/s}]\n",
	 5, "tiers.default \"gold\" is not a tier; expected one of: free"},
	{"rules:\n  - name: a\n    tiers:\n      default: free\n"
	 "      limits:\n        free: [{capacity: 1, rate: 1/s}]\n",
	 4, "has no header"},
	{"rules:\n  - name: a\n    tiers:\n      header: x-tier\n"
	 "      default: free\n      limits:\n"
	 "        free: [{capacity: 1, rate: 1/x}]\n",
	 7, "tiers.limits.free[0]: rate \"1/x\""},
	/* trusted proxies */
	{"trusted_proxies: [10.0.0.300/8]\n", 1,
	 "is not an address or CIDR block"},
	{"trusted_proxies: [10.0.0.0/33]\n", 1, "prefix /33 is too long"},
	{"trusted_proxies: [10.1.2.3/8]\n", 1,
	 "host bits set; expected the network address, e.g. 10.0.0.0/8"},
	{"trusted_proxies:\n  - \"fe80::/abc\"\n", 2, "is not an address"},
	{"trusted_proxies: 10.0.0.0/8\n", 1, "expected a list"},
	/* stores */
	{"store: mongo\n", 1, "store \"mongo\" is unknown"},
	{"store: {memory: {}, redis: {}}\n", 1, "expected exactly one"},
	{"store:\n  redis:\n    url: http://x\n", 3, "is not supported"},
	{"store: {redis_cluster: {key_prefix: x}}\n", 1, "has no seeds"},
	{"store: {redis_cluster: {seeds: [\"10.0.0.1\"]}}\n", 1,
	 "cluster seed \"10.0.0.1\" is not host:port"},
	{"store: {redis: {timeout_ms: 0}}\n", 1, "timeout_ms is 0"},
	/* TLS */
	{"store:\n  redis:\n    url: redis+tls://x:6379\n", 3,
	 "expected redis://[user:password@]host:port[/db], "
	 "rediss://[user:password@]host:port[/db] (TLS) or unix://"},
	{"store:\n  redis:\n    tls:\n      ca_file: /nonexistent/ca.pem\n", 4,
	 "store.redis.tls.ca_file \"/nonexistent/ca.pem\" cannot be opened: "
	 "No such file or directory; expected a readable PEM file"},
	{"store:\n  redis_cluster:\n    seeds: [\"10.0.0.1:7000\"]\n"
	 "    tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k}\n",
	 4, "store.redis_cluster.tls.cert_file \"/nonexistent/c.pem\" cannot"},
	{"store:\n  redis:\n    tls: {ca_fil: /etc/ssl/ca.pem}\n", 3,
	 "store.redis.tls: unknown key \"ca_fil\" (did you mean "
	 "\"ca_file\"?)"},
	{"store:\n  redis:\n    tls:\n      verify: maybe\n", 4,
	 "store.redis.tls.verify is \"maybe\"; expected true or false"},
	{"store: {redis: {tls: yes}}\n", 1,
	 "store.redis.tls is a single value; expected a mapping"},
	{"store: {redis: {tls: {ca_file: \"\"}}}\n", 1,
	 "store.redis.tls.ca_file is empty"},
	{"store: {redis: {tls: {server_name: \"redis.example.com:6380\"}}}\n",
	 1, "server_name \"redis.example.com:6380\" is not a host name"},
	{"store: {redis_cluster: {seeds: [\"rediss://10.0.0.1\"]}}\n", 1,
	 "cluster seed \"rediss://10.0.0.1\" is not host:port"},
	{"store: {redis_cluster: {seeds: [\"10.0.0.1:70000\"]}}\n", 1,
	 "is not host:port"},
	{"store: {redis_cluster: {seeds: [\"rediss://10.0.0.1:7000/1\"]}}\n", 1,
	 "is not host:port"},
	/* Sentinel */
	{"store:\n  redis:\n    sentinel:\n      addrs: [\"10.0.0.1:26379\"]\n",
	 4, "store.redis.sentinel has no master; expected master: NAME"},
	{"store:\n  redis:\n    sentinel:\n      master: \"\"\n"
	 "      addrs: [\"10.0.0.1:26379\"]\n",
	 4, "store.redis.sentinel.master \"\" is not a master name"},
	{"store:\n  redis:\n    sentinel:\n      master: [a]\n"
	 "      addrs: [\"10.0.0.1:26379\"]\n",
	 4, "store.redis.sentinel.master is a list; expected a string"},
	{"store:\n  redis:\n    sentinel:\n      master: mymaster\n"
	 "      addrs: []\n",
	 5, "store.redis.sentinel.addrs is empty; expected at least one"},
	{"store:\n  redis:\n    sentinel:\n      master: mymaster\n", 4,
	 "store.redis.sentinel has no addrs"},
	{"store:\n  redis:\n    sentinel:\n      master: mymaster\n"
	 "      addrs:\n        - \"10.0.0.1:26379\"\n        - 10.0.0.2\n",
	 7,
	 "sentinel address \"10.0.0.2\" is not host:port; expected "
	 "\"host:port\", e.g. \"10.0.0.1:26379\""},
	{"store:\n  redis:\n    sentinel:\n      master: mymaster\n"
	 "      addrs: [\"rediss://10.0.0.1:26379\"]\n",
	 5, "sentinel address \"rediss://10.0.0.1:26379\" is not host:port"},
	{"store:\n  redis:\n    sentinel: mymaster\n", 3,
	 "store.redis.sentinel is a single value; expected {master: NAME"},
	{"store:\n  redis:\n    sentinel: {master: m, addrs: [\"h:1\"], "
	 "tls: maybe}\n",
	 3, "store.redis.sentinel.tls is \"maybe\""},
	{"store:\n  redis:\n    sentinel: {master: m, addrs: [\"h:1\"], "
	 "user: admin}\n",
	 3, "store.redis.sentinel.user is given without password"},
	{"store:\n  redis:\n    sentinel: {master: m, addrs: [\"h:1\"], "
	 "password: \"\"}\n",
	 3, "store.redis.sentinel.password is empty"},
	{"store:\n  redis:\n    sentinel: {master: m, addrs: [\"h:1\"], "
	 "port: 26379}\n",
	 3, "store.redis.sentinel: unknown key \"port\""},
	{"store:\n  redis:\n    url: unix:///run/redis.sock\n"
	 "    sentinel: {master: m, addrs: [\"h:1\"]}\n",
	 3, "is a unix socket, but the Sentinels name the master"},
	{"store:\n  redis_cluster:\n    seeds: [\"10.0.0.1:7000\"]\n"
	 "    sentinel: {master: m, addrs: [\"h:1\"]}\n",
	 4, "store.redis_cluster: unknown key \"sentinel\""},
};

static void test_bad_files_name_file_and_line(void)
{
	size_t i;

	for (i = 0; i < sizeof(bad_files) / sizeof(bad_files[0]); i++) {
		const struct bad *b = &bad_files[i];
		char err[512], prefix[32];
		sluice_config_t *c = parse(b->text, err, sizeof(err));

		snprintf(prefix, sizeof(prefix), "t.yaml:%d: ", b->line);
		if (c || strncmp(err, prefix, strlen(prefix)) != 0 ||
		    !strstr(err, b->what) || !strstr(err, "; expected")) {
			fprintf(stderr,
				"bad file #%zu: want \"%s...%s\", got \"%s\"\n",
				i, prefix, b->what, c ? "(accepted)" : err);
			check_failed_now = 1;
		}
		sluice_config_free(c);
	}
}

/* libyaml takes time quadratic in the nesting depth (80,000 levels took
 * 33 s): deep nesting is refused as soon as the parser passes the bound,
 * naming the line where the level too many starts. */
static void expect_too_deep(const char *head, const char *open, size_t n,
			    const char *close, const char *tail, int line)
{
	size_t hl = strlen(head), ol = strlen(open), cl = strlen(close),
	       tl = strlen(tail), i;
	char *text = malloc(hl + (ol + cl) * n + tl + 1), *p, err[512],
	     prefix[32];
	sluice_config_t *c;

	CHECK(text != NULL);
	memcpy(text, head, hl);
	p = text + hl;
	for (i = 0; i < n; i++, p += ol)
		memcpy(p, open, ol);
	for (i = 0; i < n; i++, p += cl)
		memcpy(p, close, cl);
	memcpy(p, tail, tl + 1);
	c = parse(text, err, sizeof(err));
	free(text);
	snprintf(prefix, sizeof(prefix), "t.yaml:%d: ", line);
	if (c || strncmp(err, prefix, strlen(prefix)) != 0 ||
	    !strstr(err, "nesting deeper than 32 levels"))
		fprintf(stderr, "deep %s: got \"%s\"\n", open,
			c ? "(accepted)" : err);
	CHECK(c == NULL);
	CHECK(strncmp(err, prefix, strlen(prefix)) == 0);
	CHECK(strstr(err, "nesting deeper than 32 levels") != NULL);
}

static void test_deep_nesting_is_refused_early(void)
{
	char text[8192];
	size_t i, n = 0;

	expect_too_deep("listen: 127.0.0.1:9000\nrules: ", "[", 100000, "]",
			"\n", 2);
	expect_too_deep("listen: 127.0.0.1:9000\nrules:\n", "- ", 100000, "",
			"x\n", 3);
	expect_too_deep("rules: ", "{a: ", 100000, "}", "\n", 1);
	expect_too_deep("rules: ", "[{a: ", 100000, "}]", "\n", 1);
	/* Block mappings, one level per line: level d starts on line d. */
	for (i = 0; i < 40; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%*sk%zu:\n",
				      (int)(2 * i), "", i);
	expect_too_deep(text, "", 0, "", "", 33);
	/* 32 levels are still read (and refused for what they hold). */
	n = 0;
	for (i = 0; i < 31; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%*sk%zu:\n",
				      (int)(2 * i), "", i);
	n += (size_t)snprintf(text + n, sizeof(text) - n, "%*s[1]\n",
			      (int)(2 * i), "");
	{
		char err[512];
		sluice_config_t *c = parse(text, err, sizeof(err));

		CHECK(c == NULL);
		CHECK(strstr(err, "nesting deeper") == NULL);
		CHECK(strncmp(err, "t.yaml:1: ", 10) == 0);
	}
}

/* Level 0 anchors a list of three scalars; level k a list of three
 * aliases of level k-1: 3^k nodes to walk from a line of text each.
 * Written from line `first` on, one level a line, as the items of a
 * list indented by `indent`.  Returns the line of the alias past which
 * the aliases stand for more than SLUICE_YAML_MAX_ALIAS_NODES nodes. */
static int alias_bomb(char *out, size_t len, int levels, int indent, int first)
{
	uint64_t size = 4, aliased = 0;
	int k, j, line = 0;
	size_t n;

	n = (size_t)snprintf(out, len, "%*s- &a0 [x, x, x]\n", indent, "");
	for (k = 1; k < levels; k++) {
		n += (size_t)snprintf(out + n, len - n,
				      "%*s- &a%d [*a%d, *a%d, *a%d]\n", indent,
				      "", k, k - 1, k - 1, k - 1);
		for (j = 0; j < 3 && !line; j++) {
			aliased += size;
			if (aliased > 100000)
				line = first + k;
		}
		size = 1 + 3 * size;
	}
	CHECK(n < len);
	return line;
}

/* An alias bomb: libyaml shares the aliased nodes, but a walk visits
 * each once per reference (3^14 nodes from 743 bytes kept a reload busy
 * with gigabytes).  What aliases stand for is counted as the file is
 * read and refused past the bound, naming the alias that passes it. */
static void test_alias_bomb_is_refused_at_the_alias(void)
{
	char text[4096], bomb[2048], err[512], want[32];
	int line = alias_bomb(bomb, sizeof(bomb), 20, 2, 3);
	sluice_config_t *c;

	CHECK(line > 3);
	snprintf(text, sizeof(text),
		 "listen: 127.0.0.1:9000\nbomb:\n%s"
		 "rules: [{name: r, limits: [{capacity: 1, rate: 1/s}]}]\n",
		 bomb);
	c = parse(text, err, sizeof(err));
	CHECK(c == NULL);
	snprintf(want, sizeof(want), "t.yaml:%d: ", line);
	if (strncmp(err, want, strlen(want)) != 0)
		fprintf(stderr, "want %s, got %s\n", want, err);
	CHECK(strncmp(err, want, strlen(want)) == 0);
	CHECK(strstr(err, "aliases stand for more than 100000 nodes") != NULL);
	/* An alias inside the node it names is a walk without end. */
	c = parse("listen: 127.0.0.1:9000\nrules: &r\n  - *r\n", err,
		  sizeof(err));
	CHECK(c == NULL);
	CHECK(strncmp(err,
		      "t.yaml:3: the alias *r is inside the node it "
		      "names",
		      36) == 0);
	/* An alias adds the depth of what it names. */
	c = parse("listen: 127.0.0.1:9000\n"
		  "x: &d "
		  "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
		  "]\n"
		  "rules: [[[*d]]]\n",
		  err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strstr(err, "t.yaml:3: nesting deeper than 32 levels (through "
			  "the alias *d)") != NULL);
}

/* Anchors that repeat a little (a shared limit) still load, and mean
 * what they stand for. */
static void test_anchors_for_shared_limits_load(void)
{
	char err[512];
	sluice_config_t *c = parse(
		"listen: 127.0.0.1:9000\n"
		"rules:\n"
		"  - {name: a, match: {path: /a}, limits: &l [{capacity: 7, "
		"rate: 1/s}]}\n"
		"  - {name: b, match: {path: /b}, limits: *l}\n",
		err, sizeof(err));

	if (!c)
		fprintf(stderr, "%s\n", err);
	CHECK(c != NULL);
	CHECK(c->nrules == 2);
	CHECK(c->rules[1].limits.limits[0].capacity == 7);
	sluice_config_free(c);
}

int main(void)
{
	RUN(test_bad_files_name_file_and_line);
	RUN(test_deep_nesting_is_refused_early);
	RUN(test_alias_bomb_is_refused_at_the_alias);
	RUN(test_anchors_for_shared_limits_load);
	TESTS_DONE();
}
