/*
 * test_config_stores.c -- the config's Redis stores: URLs (masked in every
 * error), rediss:// and its TLS defaults, the tls: block, Sentinel, and
 * every TLS and Sentinel error reported by a check.
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

int main(void)
{
	RUN(test_bad_redis_urls_fail_at_load_masked);
	RUN(test_redis_stores);
	RUN(test_rediss_url_turns_tls_on_with_the_defaults);
	RUN(test_rediss_seed_turns_tls_on_for_the_cluster);
	RUN(test_tls_block_with_mutual_tls);
	RUN(test_sentinel);
	RUN(test_check_reports_every_tls_and_sentinel_error);
	TESTS_DONE();
}
