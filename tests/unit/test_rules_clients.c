/*
 * test_rules_clients.c -- whose bucket: tiers, repeated header lines, and
 * the client address behind trusted proxies (X-Forwarded-For spoofing, IPv6
 * grouping, IPv4-mapped peers); the key hash's SHA-256.
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
	RUN(test_client_addresses_table);
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
