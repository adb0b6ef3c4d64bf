/*
 * test_config.c -- the YAML config: every field is read, every kind of bad
 * file is refused with "FILE:LINE: what is wrong; what was expected".
 */
#include "check.h"
#include "policy/config/config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes text to a new file named from the template path (which gets its
 * name); the caller unlinks it. */
static void write_temp(char *path, const char *text)
{
	int fd = mkstemp(path);
	FILE *f;

	CHECK(fd >= 0);
	f = fdopen(fd, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

static sluice_config_t *parse(const char *text, char *err, size_t errlen)
{
	return sluice_config_parse("t.yaml", text, strlen(text), err, errlen);
}

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

/* A Redis URL loads only when the store's own parser takes it (what
 * check-config accepts, serve connects with), and an error names
 * t.yaml:line with the URL's password masked. */
static void test_bad_redis_urls_fail_at_load_masked(void)
{
	static const char *const bad[][2] = {
		{"redis://app:S3CRETpw@h:99999", "port must be 1..65535"},
		{"redis://app:S3CRETpw@h:6379/abc", "db number"},
		{"redis://app:S3CRETpw@:6379", "no host"},
		{"redis://app:S3CRETpw@h:6379/0?timeout=1",
		 "unknown query parameter \"timeout\""},
		{"redis://h:6379/0?password=S3CRETpw&timeout=1",
		 "h:6379/0?password=***&timeout=1"},
		{"redis://app:S3CRETpw@h:6379/0/1", "db number"},
		{"redis://app:S3CRETpw@h x:6379", "white space"},
		{"redis://app:S3CRETpw@h;x:6379", "the host may hold only"},
		{"unix:///run/redis.sock?dbx=1", "unknown query parameter"},
	};
	char text[256], err[512];
	sluice_config_t *c;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text),
			 "store:\n  redis:\n    url: \"%s\"\n", bad[i][0]);
		c = parse(text, err, sizeof(err));
		if (c || !strstr(err, "t.yaml:3") || !strstr(err, bad[i][1]) ||
		    strstr(err, "S3CRETpw")) {
			fprintf(stderr, "url %s: \"%s\"\n", bad[i][0],
				c ? "(loaded)" : err);
			CHECK(0);
		}
		CHECK(strstr(bad[i][0], "app:") == NULL ||
		      strstr(err, "app:***@") != NULL);
	}
	/* A seed with a password is masked too. */
	c = parse("store: {redis_cluster: {seeds: "
		  "[\"redis://a:S3CRETpw@h:99999\"]}}\n",
		  err, sizeof(err));
	CHECK(c == NULL && strstr(err, "a:***@h:99999") &&
	      !strstr(err, "S3CRETpw"));
}

static void test_redis_stores(void)
{
	char err[512];
	sluice_config_t *c;

	c = parse("store:\n  redis:\n    url: redis://10.0.0.5:6380/2\n"
		  "    key_prefix: \"rl:\"\n    timeout_ms: 20\n"
		  "    connections: 4\n    max_keys: 500\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	if (c) {
		CHECK(c->store.kind == SLUICE_STORE_REDIS);
		CHECK(strcmp(c->store.url, "redis://10.0.0.5:6380/2") == 0);
		CHECK(strcmp(c->store.key_prefix, "rl:") == 0);
		CHECK(c->store.timeout_ms == 20);
		CHECK(c->store.connections == 4);
		CHECK(c->store.max_keys == 500);
		sluice_config_free(c);
	}
	c = parse("store: redis\n", err, sizeof(err));
	CHECK(c != NULL);
	if (c) {
		CHECK(c->store.kind == SLUICE_STORE_REDIS);
		CHECK(strcmp(c->store.url, "redis://127.0.0.1:6379") == 0);
		CHECK(strcmp(c->store.key_prefix, "sluice:") == 0);
		CHECK(c->store.timeout_ms == 50 && c->store.connections == 1);
		sluice_config_free(c);
	}
	c = parse("store: {redis_cluster: {seeds: [\"10.0.0.1:7000\", "
		  "\"10.0.0.2:7001\"], timeout_ms: 30}}\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	if (c) {
		CHECK(c->store.kind == SLUICE_STORE_REDIS_CLUSTER);
		CHECK(c->store.nseeds == 2);
		CHECK(strcmp(c->store.seeds[1], "10.0.0.2:7001") == 0);
		CHECK(c->store.timeout_ms == 30);
		sluice_config_free(c);
	}
}

static void test_rediss_url_turns_tls_on_with_the_defaults(void)
{
	char err[512];
	sluice_config_t *c;

	c = parse("store:\n  redis:\n"
		  "    url: \"rediss://:s3cret@redis.example.com:6380/1\"\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	if (!c)
		return;
	CHECK(c->store.kind == SLUICE_STORE_REDIS);
	CHECK(strcmp(c->store.url,
		     "rediss://:s3cret@redis.example.com:6380/1") == 0);
	CHECK(c->store.tls.enabled == 1 && c->store.tls.verify == 1);
	CHECK(c->store.tls.ca_file == NULL && c->store.tls.cert_file == NULL);
	CHECK(c->store.tls.key_file == NULL &&
	      c->store.tls.server_name == NULL);
	CHECK(c->store.sentinel.master == NULL);
	sluice_config_free(c);
	/* redis:// without tls: plain, and certificates would be checked */
	c = parse("store: {redis: {url: \"redis://10.0.0.5:6379\"}}\n", err,
		  sizeof(err));
	CHECK(c != NULL);
	if (!c)
		return;
	CHECK(c->store.tls.enabled == 0 && c->store.tls.verify == 1);
	sluice_config_free(c);
	/* "tls: {}" (or "tls:" alone) turns TLS on even for redis:// */
	c = parse("store:\n  redis:\n    url: \"redis://10.0.0.5:6379\"\n"
		  "    tls: {}\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	CHECK(c && c->store.tls.enabled == 1 && c->store.tls.verify == 1);
	sluice_config_free(c);
	c = parse("store:\n  redis:\n    tls:\n", err, sizeof(err));
	CHECK(c != NULL);
	CHECK(c && c->store.tls.enabled == 1);
	CHECK(c && strcmp(c->store.url, "redis://127.0.0.1:6379") == 0);
	sluice_config_free(c);
	c = parse("store: {redis: {tls: {verify: false}}}\n", err, sizeof(err));
	CHECK(c != NULL);
	CHECK(c && c->store.tls.enabled == 1 && c->store.tls.verify == 0);
	sluice_config_free(c);
}

static void test_rediss_seed_turns_tls_on_for_the_cluster(void)
{
	char err[512];
	sluice_config_t *c;

	c = parse("store:\n  redis_cluster:\n    seeds:\n"
		  "      - \"10.0.0.1:7000\"\n"
		  "      - \"redis://10.0.0.2:7001\"\n"
		  "      - \"rediss://10.0.0.3:7002\"\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	if (!c)
		return;
	CHECK(c->store.kind == SLUICE_STORE_REDIS_CLUSTER);
	CHECK(c->store.nseeds == 3);
	CHECK(strcmp(c->store.seeds[0], "10.0.0.1:7000") == 0);
	CHECK(strcmp(c->store.seeds[1], "redis://10.0.0.2:7001") == 0);
	CHECK(strcmp(c->store.seeds[2], "rediss://10.0.0.3:7002") == 0);
	CHECK(c->store.tls.enabled == 1);
	sluice_config_free(c);
	c = parse("store: {redis_cluster: {seeds: [\"redis://10.0.0.1:7000\"]}}"
		  "\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	CHECK(c && c->store.tls.enabled == 0);
	sluice_config_free(c);
	c = parse("store:\n  redis_cluster:\n    seeds: [\"10.0.0.1:7000\"]\n"
		  "    tls: {server_name: redis.internal, verify: true}\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	if (!c)
		return;
	CHECK(c->store.tls.enabled == 1 && c->store.tls.verify == 1);
	CHECK(strcmp(c->store.tls.server_name, "redis.internal") == 0);
	sluice_config_free(c);
}

/* PEM files for the tls: tests (their contents are not read at load,
 * only that they can be). */
struct pem_dir {
	char dir[64], ca[96], cert[96], key[96], empty[96], fifo[96];
};

static void pem_write(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

static void pem_dir_make(struct pem_dir *p)
{
	snprintf(p->dir, sizeof(p->dir), "/tmp/sluice-test-tls-XXXXXX");
	CHECK(mkdtemp(p->dir) != NULL);
	snprintf(p->ca, sizeof(p->ca), "%s/ca.pem", p->dir);
	snprintf(p->cert, sizeof(p->cert), "%s/client.pem", p->dir);
	snprintf(p->key, sizeof(p->key), "%s/client.key", p->dir);
	snprintf(p->empty, sizeof(p->empty), "%s/empty.pem", p->dir);
	snprintf(p->fifo, sizeof(p->fifo), "%s/fifo.pem", p->dir);
	pem_write(p->ca, "-----BEGIN CERTIFICATE-----\n");
	pem_write(p->cert, "-----BEGIN CERTIFICATE-----\n");
	pem_write(p->key, "-----BEGIN PRIVATE KEY-----\n");
	pem_write(p->empty, "");
}

static void pem_dir_remove(struct pem_dir *p)
{
	unlink(p->ca);
	unlink(p->cert);
	unlink(p->key);
	unlink(p->empty);
	unlink(p->fifo);
	rmdir(p->dir);
}

/* One bad config, refused with "t.yaml:LINE: ...what...; expected". */
static void expect_bad(const char *text, int line, const char *what)
{
	char err[512], prefix[32];
	sluice_config_t *c = parse(text, err, sizeof(err));

	snprintf(prefix, sizeof(prefix), "t.yaml:%d: ", line);
	if (c || strncmp(err, prefix, strlen(prefix)) != 0 ||
	    !strstr(err, what) || !strstr(err, "; expected"))
		fprintf(stderr, "want \"%s...%s\", got \"%s\"\n", prefix, what,
			c ? "(accepted)" : err);
	sluice_config_free(c);
	CHECK(c == NULL);
	CHECK(strncmp(err, prefix, strlen(prefix)) == 0);
	CHECK(strstr(err, what) != NULL);
}

static void test_tls_block_with_mutual_tls(void)
{
	struct pem_dir p;
	char text[1024], err[512];
	sluice_config_t *c;

	pem_dir_make(&p);
	snprintf(text, sizeof(text),
		 "store:\n  redis:\n    url: \"rediss://redis.internal:6380\"\n"
		 "    tls:\n      ca_file: %s\n      cert_file: %s\n"
		 "      key_file: %s\n      server_name: redis.internal\n"
		 "      verify: true\n",
		 p.ca, p.cert, p.key);
	c = parse(text, err, sizeof(err));
	if (!c)
		fprintf(stderr, "%s\n", err);
	CHECK(c != NULL);
	if (c) {
		CHECK(c->store.tls.enabled == 1 && c->store.tls.verify == 1);
		CHECK(strcmp(c->store.tls.ca_file, p.ca) == 0);
		CHECK(strcmp(c->store.tls.cert_file, p.cert) == 0);
		CHECK(strcmp(c->store.tls.key_file, p.key) == 0);
		CHECK(strcmp(c->store.tls.server_name, "redis.internal") == 0);
		sluice_config_free(c);
	}
	/* the key without its certificate, and the reverse */
	snprintf(text, sizeof(text),
		 "store:\n  redis:\n    tls:\n      key_file: %s\n", p.key);
	expect_bad(text, 4,
		   "store.redis.tls.key_file is given without cert_file; "
		   "expected both (mutual TLS) or neither");
	snprintf(text, sizeof(text),
		 "store:\n  redis:\n    tls:\n      ca_file: %s\n"
		 "      cert_file: %s\n",
		 p.ca, p.cert);
	expect_bad(text, 5, "cert_file is given without key_file");
	/* a directory, a FIFO (refused without waiting for a writer), an
	 * empty file */
	snprintf(text, sizeof(text),
		 "store:\n  redis:\n    tls:\n      ca_file: %s\n", p.dir);
	expect_bad(text, 4,
		   "is a directory, not a regular file; expected a "
		   "readable PEM file");
	CHECK(mkfifo(p.fifo, 0600) == 0);
	snprintf(text, sizeof(text),
		 "store:\n  redis:\n    tls:\n      ca_file: %s\n", p.fifo);
	expect_bad(text, 4, "is a FIFO, not a regular file");
	snprintf(text, sizeof(text),
		 "store:\n  redis:\n    tls:\n      ca_file: %s\n", p.empty);
	expect_bad(text, 4, "is empty; expected a readable PEM file");
	/* the file's absence is noticed at load (and at every reload) */
	pem_dir_remove(&p);
	snprintf(text, sizeof(text),
		 "store:\n  redis:\n    tls:\n      ca_file: %s\n"
		 "      cert_file: %s\n      key_file: %s\n",
		 p.ca, p.cert, p.key);
	expect_bad(text, 4, "cannot be opened: No such file or directory");
}

static void test_sentinel(void)
{
	char err[512];
	sluice_config_t *c;

	/* no url: the Sentinels name the master, no credentials */
	c = parse("store:\n  redis:\n    sentinel:\n      master: mymaster\n"
		  "      addrs: [\"10.0.0.1:26379\", \"10.0.0.2:26379\", "
		  "\"sentinel-3.internal:26379\"]\n",
		  err, sizeof(err));
	if (!c)
		fprintf(stderr, "%s\n", err);
	CHECK(c != NULL);
	if (!c)
		return;
	CHECK(c->store.kind == SLUICE_STORE_REDIS);
	CHECK(c->store.url == NULL);
	CHECK(strcmp(c->store.sentinel.master, "mymaster") == 0);
	CHECK(c->store.sentinel.naddrs == 3);
	CHECK(strcmp(c->store.sentinel.addrs[0], "10.0.0.1:26379") == 0);
	CHECK(strcmp(c->store.sentinel.addrs[2], "sentinel-3.internal:26379") ==
	      0);
	CHECK(c->store.sentinel.user == NULL &&
	      c->store.sentinel.password == NULL);
	CHECK(c->store.sentinel.tls == 0 && c->store.tls.enabled == 0);
	sluice_config_free(c);
	/* a rediss:// url: the master over TLS, the Sentinels too unless
	 * told otherwise */
	c = parse("store:\n  redis:\n    url: \"rediss://app:pw@master/2\"\n"
		  "    sentinel:\n      master: mymaster\n"
		  "      addrs: [\"10.0.0.1:26379\"]\n"
		  "      user: sentinel-user\n      password: sentinel-pw\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	if (!c)
		return;
	CHECK(strcmp(c->store.url, "rediss://app:pw@master/2") == 0);
	CHECK(c->store.tls.enabled == 1 && c->store.sentinel.tls == 1);
	CHECK(strcmp(c->store.sentinel.user, "sentinel-user") == 0);
	CHECK(strcmp(c->store.sentinel.password, "sentinel-pw") == 0);
	sluice_config_free(c);
	/* a tls: block likewise; tls: false keeps the Sentinels plain */
	c = parse("store:\n  redis:\n    tls: {server_name: redis.internal}\n"
		  "    sentinel: {master: m, addrs: [\"h:26379\"]}\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	CHECK(c && c->store.tls.enabled == 1 && c->store.sentinel.tls == 1);
	sluice_config_free(c);
	c = parse("store:\n  redis:\n    tls: {}\n"
		  "    sentinel: {master: m, addrs: [\"h:26379\"], tls: false,"
		  " password: pw}\n",
		  err, sizeof(err));
	CHECK(c != NULL);
	CHECK(c && c->store.tls.enabled == 1 && c->store.sentinel.tls == 0);
	CHECK(c && c->store.sentinel.user == NULL &&
	      strcmp(c->store.sentinel.password, "pw") == 0);
	sluice_config_free(c);
	/* and the reverse: plain master, Sentinels over TLS */
	c = parse(
		"store:\n  redis:\n"
		"    sentinel: {master: m, addrs: [\"h:26379\"], tls: true}\n",
		err, sizeof(err));
	CHECK(c != NULL);
	CHECK(c && c->store.tls.enabled == 0 && c->store.sentinel.tls == 1);
	sluice_config_free(c);
}

/* check-config names every bad key of a tls: and sentinel: block. */
static void test_check_reports_every_tls_and_sentinel_error(void)
{
	static const char text[] =
		"store:\n"			       /* 1 */
		"  redis:\n"			       /* 2 */
		"    tls:\n"			       /* 3 */
		"      ca_file: /nonexistent/ca.pem\n" /* 4 */
		"      verify: maybe\n"		       /* 5 */
		"      sni: x\n"		       /* 6 */
		"    sentinel:\n"		       /* 7 */
		"      addrs: []\n";		       /* 8 */
	char path[] = "/tmp/sluice-test-config-XXXXXX";
	char report[4096];

	write_temp(path, text);
	CHECK(sluice_config_check(path, report, sizeof(report), 20) == 5);
	CHECK(strstr(report, ":4: store.redis.tls.ca_file") != NULL);
	CHECK(strstr(report, ":5: store.redis.tls.verify") != NULL);
	CHECK(strstr(report, ":6: store.redis.tls: unknown key \"sni\"") !=
	      NULL);
	CHECK(strstr(report, ":8: store.redis.sentinel has no master") != NULL);
	CHECK(strstr(report, ":8: store.redis.sentinel.addrs is empty") !=
	      NULL);
	unlink(path);
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
	RUN(test_bad_redis_urls_fail_at_load_masked);
	RUN(test_file_without_rules_gets_the_classic_rule);
	RUN(test_issue_example_parses);
	RUN(test_every_top_level_field);
	RUN(test_redis_stores);
	RUN(test_rediss_url_turns_tls_on_with_the_defaults);
	RUN(test_rediss_seed_turns_tls_on_for_the_cluster);
	RUN(test_tls_block_with_mutual_tls);
	RUN(test_sentinel);
	RUN(test_check_reports_every_tls_and_sentinel_error);
	RUN(test_empty_trusted_proxies_trusts_nobody);
	RUN(test_proxy_names_the_headers_read);
	RUN(test_bad_files_name_file_and_line);
	RUN(test_check_reads_on_after_errors);
	RUN(test_many_overrides_are_found_in_constant_time);
	RUN(test_deep_nesting_is_refused_early);
	RUN(test_alias_bomb_is_refused_at_the_alias);
	RUN(test_anchors_for_shared_limits_load);
	RUN(test_load_reads_a_file_and_names_it);
	RUN(test_example_file_is_valid);
	RUN(test_listen_parse);
	TESTS_DONE();
}
