/*
 * test_envoy_rls.c -- the RLS engine through its C API (src/policy/envoy/rls.h)
 * on the memory store: envoyproxy/ratelimit's README examples answered as
 * there (or, where a token bucket answers otherwise, as a bucket does,
 * said at each place), all-or-nothing across descriptors, shadow_mode,
 * unlimited, replaces, request-supplied limits and hits_addend.
 *
 * Limits here are per hour or per day, so the few microseconds a test
 * runs refill nothing a whole token would show.
 */
#include "check.h"
#include "policy/envoy/config.h"
#include "policy/envoy/metrics.h"
#include "policy/envoy/rls.h"
#include "policy/svc.h"
#include "stores.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static sluice_svc_t svc;
static sluice_memstore_t *store;
static size_t store_keys = 10000; /* the memory store's max_keys */

static void put(const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	CHECK((f = fopen(path, "w")) != NULL);
	fputs(text, f);
	fclose(f);
}

/* A service whose envoy section reads `files` (name, text, ...). */
static void start(const char *extra, const char *name, const char *text)
{
	char cfgtext[512], err[1024];
	sluice_config_t *cfg;

	snprintf(dir, sizeof(dir), "/tmp/sluice-rls-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	put(name, text);
	snprintf(cfgtext, sizeof(cfgtext), "envoy:\n  config_dir: %s\n%s", dir,
		 extra ? extra : "");
	cfg = sluice_config_parse("sluice.yaml", cfgtext, strlen(cfgtext), err,
				  sizeof(err));
	if (!cfg)
		fprintf(stderr, "%s\n", err);
	CHECK(cfg != NULL);
	CHECK((store = open_memstore(store_keys)) != NULL);
	memset(&svc, 0, sizeof(svc));
	sluice_backend_memory(&svc.backend, store);
	CHECK((svc.live = sluice_live_new(cfg)) != NULL);
}

static void stop(void)
{
	char cmd[128];

	sluice_live_unref(svc.live);
	sluice_memstore_free(store);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
}

static sluice_rls_response_t *got;

static void on_answer(void *arg, sluice_rls_response_t *r)
{
	got = r;
}

/* Descriptors as "k=v,k=v|k=v" (| between descriptors). */
static sluice_rls_response_t *decide_ex(const char *domain, const char *spec,
					uint32_t hits,
					sluice_rls_descriptor_t *extra)
{
	static char buf[1024];
	static sluice_rls_entry_t e[32];
	static sluice_rls_descriptor_t d[8];
	sluice_rls_request_t req = {.domain = domain, .hits_addend = hits};
	char err[256], *desc, *s1 = NULL;
	size_t ne = 0, nd = 0;

	snprintf(buf, sizeof(buf), "%s", spec);
	memset(d, 0, sizeof(d));
	for (desc = strtok_r(buf, "|", &s1); desc;
	     desc = strtok_r(NULL, "|", &s1)) {
		char *ent, *s2 = NULL;

		d[nd].entries = &e[ne];
		for (ent = strtok_r(desc, ",", &s2); ent;
		     ent = strtok_r(NULL, ",", &s2)) {
			char *eq = strchr(ent, '=');

			*eq = '\0';
			e[ne].key = ent;
			e[ne++].value = eq + 1;
			d[nd].nentries++;
		}
		if (extra && nd == 0) {
			sluice_rls_descriptor_t x = *extra;

			x.entries = d[0].entries;
			x.nentries = d[0].nentries;
			d[0] = x;
		}
		nd++;
	}
	req.descriptors = d;
	req.ndescriptors = nd;
	got = NULL;
	CHECK(sluice_rls_decide(&svc, &req, on_answer, NULL, err,
				sizeof(err)) == 0);
	CHECK(got != NULL); /* the memory store answers at once */
	CHECK(got->status == 0);
	CHECK(got->nstatuses == nd);
	return got;
}

static sluice_rls_response_t *decide(const char *domain, const char *spec)
{
	return decide_ex(domain, spec, 0, NULL);
}

#define OK   SLUICE_RLS_CODE_OK
#define OVER SLUICE_RLS_CODE_OVER_LIMIT

/* --------------------------------------------------------- the README */

static const char example2[] =
	"domain: messaging\n"
	"descriptors:\n"
	"  - key: message_type\n"
	"    value: marketing\n"
	"    descriptors:\n"
	"      - key: to_number\n"
	"        rate_limit: {unit: day, requests_per_unit: 5}\n"
	"  - key: to_number\n"
	"    rate_limit: {unit: day, requests_per_unit: 100}\n";

/* Example 2: 5 marketing messages a day per number, 100 messages a day
 * per number; one request carries both descriptors. */
static void test_example2_marketing_five_a_day(void)
{
	const char *both = "message_type=marketing,to_number=2061111111|"
			   "to_number=2061111111";
	sluice_rls_response_t *r;
	int i;

	start(NULL, "messaging.yaml", example2);
	for (i = 0; i < 5; i++) {
		r = decide("messaging", both);
		CHECK(r->overall_code == OK);
		CHECK(r->statuses[0].has_limit);
		CHECK_EQ_U64(r->statuses[0].requests_per_unit, 5);
		CHECK(r->statuses[0].unit == SLUICE_RLS_UNIT_DAY);
		CHECK_EQ_U64(r->statuses[0].limit_remaining, 4 - i);
		CHECK_EQ_U64(r->statuses[1].limit_remaining, 99 - i);
		sluice_rls_response_free(r);
	}
	r = decide("messaging", both);
	CHECK(r->overall_code == OVER);
	CHECK(r->statuses[0].code == OVER);
	/* All or nothing (sluice's semantics; envoyproxy/ratelimit's fixed
	 * window would count the 100/day descriptor anyway): the 100/day
	 * bucket was not charged for the refused request. */
	CHECK(r->statuses[1].code == OK);
	CHECK_EQ_U64(r->statuses[1].limit_remaining, 95);
	/* A bucket reports the time until it is full again: 5 tokens a day,
	 * all 5 taken, so a whole day (the fixed window would say "until
	 * midnight"). */
	CHECK(r->statuses[0].duration_until_reset_ms > 86399000);
	CHECK(r->statuses[0].duration_until_reset_ms <= 86400000);
	sluice_rls_response_free(r);
	/* Another number has its own buckets. */
	r = decide("messaging", "message_type=marketing,to_number=2062222222");
	CHECK(r->overall_code == OK);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 4);
	sluice_rls_response_free(r);
	/* Non-marketing traffic to the first number: its own 100/day. */
	r = decide("messaging", "to_number=2061111111");
	CHECK(r->overall_code == OK);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 94);
	sluice_rls_response_free(r);
	stop();
}

/* Example 3: 10/s per address; 50.0.0.5 gets 0 (refused always). */
static void test_example3_blacklisted_address(void)
{
	sluice_rls_response_t *r;

	start(NULL, "edge.yaml",
	      "domain: edge_proxy_per_ip\n"
	      "descriptors:\n"
	      "  - key: remote_address\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
	      "  - key: remote_address\n"
	      "    value: 50.0.0.5\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 0}\n");
	r = decide("edge_proxy_per_ip", "remote_address=50.0.0.1");
	CHECK(r->overall_code == OK);
	CHECK_EQ_U64(r->statuses[0].requests_per_unit, 10);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 9);
	sluice_rls_response_free(r);
	r = decide("edge_proxy_per_ip",
		   "remote_address=50.0.0.5|remote_address=50.0.0.1");
	CHECK(r->overall_code == OVER);
	CHECK(r->statuses[0].code == OVER);
	CHECK_EQ_U64(r->statuses[0].requests_per_unit, 0);
	/* The other descriptor is looked at, not charged. */
	CHECK(r->statuses[1].code == OK);
	CHECK_EQ_U64(r->statuses[1].limit_remaining, 9);
	sluice_rls_response_free(r);
	stop();
}

/* Example 4: the request's depth must be the config's. */
static void test_example4_depth(void)
{
	sluice_rls_response_t *r;

	start(NULL, "e4.yaml",
	      "domain: example4\n"
	      "descriptors:\n"
	      "  - key: key\n"
	      "    value: value\n"
	      "    rate_limit: {requests_per_unit: 300, unit: second}\n");
	r = decide("example4", "key=value,subkey=subvalue");
	CHECK(r->overall_code == OK && !r->statuses[0].has_limit);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 0);
	sluice_rls_response_free(r);
	stop();
}

/* Example 5: unlimited is OK with limit_remaining UINT32_MAX. */
static void test_example5_unlimited(void)
{
	sluice_rls_response_t *r;
	int i;

	start(NULL, "internal.yaml",
	      "domain: internal\n"
	      "descriptors:\n"
	      "  - key: ldap\n"
	      "    rate_limit: {unlimited: true}\n"
	      "  - key: azure\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 2}\n");
	for (i = 0; i < 3; i++) {
		r = decide("internal", "ldap=x");
		CHECK(r->overall_code == OK);
		CHECK(!r->statuses[0].has_limit);
		CHECK_EQ_U64(r->statuses[0].limit_remaining, UINT32_MAX);
		sluice_rls_response_free(r);
	}
	r = decide("internal", "azure=x");
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 1);
	sluice_rls_response_free(r);
	stop();
}

/* Example 6: user-a is in shadow_mode: charged, never refused. */
static void test_example6_shadow_mode(void)
{
	sluice_rls_response_t *r;
	int i;

	start(NULL, "e6.yaml",
	      "domain: example6\n"
	      "descriptors:\n"
	      "  - key: service\n"
	      "    descriptors:\n"
	      "      - key: user\n"
	      "        value: user-a\n"
	      "        rate_limit: {requests_per_unit: 2, unit: hour}\n"
	      "        shadow_mode: true\n"
	      "      - key: user\n"
	      "        value: user-b\n"
	      "        rate_limit: {requests_per_unit: 2, unit: hour}\n");
	for (i = 0; i < 4; i++) {
		r = decide("example6", "service=auth-service,user=user-a");
		CHECK(r->overall_code == OK);
		CHECK(r->statuses[0].code == OK);
		CHECK(r->statuses[0].has_limit);
		sluice_rls_response_free(r);
	}
	for (i = 0; i < 3; i++) {
		r = decide("example6", "service=auth-service,user=user-b");
		CHECK(r->overall_code == (i < 2 ? OK : OVER));
		sluice_rls_response_free(r);
	}
	stop();
}

/* Example 7: replaces. */
static void test_example7_replaces(void)
{
	const char *k1 = "key_1=value_1,user=bkthomps";
	const char *k2 = "key_2=value_2,user=bkthomps";
	sluice_rls_response_t *r;
	char both[128];
	int i;

	start(NULL, "e7.yaml",
	      "domain: example7\n"
	      "descriptors:\n"
	      "  - key: key_1\n"
	      "    value: value_1\n"
	      "    descriptors:\n"
	      "      - key: user\n"
	      "        value: bkthomps\n"
	      "        rate_limit:\n"
	      "          name: specific_limit\n"
	      "          requests_per_unit: 5\n"
	      "          unit: hour\n"
	      "  - key: key_2\n"
	      "    value: value_2\n"
	      "    descriptors:\n"
	      "      - key: user\n"
	      "        value: bkthomps\n"
	      "        rate_limit:\n"
	      "          replaces:\n"
	      "            - name: specific_limit\n"
	      "          requests_per_unit: 10\n"
	      "          unit: hour\n");
	snprintf(both, sizeof(both), "%s|%s", k1, k2);
	/* Both together: only the 10/hour limit applies; the replaced
	 * 5/hour one is neither reported nor charged. */
	for (i = 0; i < 7; i++) {
		r = decide("example7", both);
		CHECK(r->overall_code == OK);
		CHECK(!r->statuses[0].has_limit);
		CHECK_EQ_U64(r->statuses[1].requests_per_unit, 10);
		sluice_rls_response_free(r);
	}
	r = decide("example7", k1);
	CHECK_EQ_U64(r->statuses[0].requests_per_unit, 5);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 4);
	CHECK(r->statuses[0].limit_name &&
	      strcmp(r->statuses[0].limit_name, "specific_limit") == 0);
	sluice_rls_response_free(r);
	stop();
}

/* An unlimited limit named in another's replaces stays unlimited (as
 * envoyproxy/ratelimit, which drops unlimited limits before replacing). */
static void test_unlimited_is_not_replaced(void)
{
	sluice_rls_response_t *r;

	start(NULL, "u.yaml",
	      "domain: u\n"
	      "descriptors:\n"
	      "  - key: a\n"
	      "    rate_limit: {name: free, unlimited: true}\n"
	      "  - key: b\n"
	      "    rate_limit:\n"
	      "      replaces: [{name: free}]\n"
	      "      unit: hour\n"
	      "      requests_per_unit: 3\n");
	r = decide("u", "a=1|b=1");
	CHECK_EQ_U64(r->statuses[0].limit_remaining, UINT32_MAX);
	CHECK_EQ_U64(r->statuses[1].limit_remaining, 2);
	sluice_rls_response_free(r);
	stop();
}

/* Example 11: share_threshold shares one bucket across the pattern. */
static void test_example11_share_threshold(void)
{
	sluice_rls_response_t *r;
	int i;

	start(NULL, "e11.yaml",
	      "domain: example11\n"
	      "descriptors:\n"
	      "  - key: files\n"
	      "    value: files/*\n"
	      "    share_threshold: true\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
	      "  - key: files_no_share\n"
	      "    value: files_no_share/*\n"
	      "    share_threshold: false\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 10}\n");
	for (i = 0; i < 5; i++) {
		sluice_rls_response_free(
			decide("example11", "files=files/a.pdf"));
		sluice_rls_response_free(
			decide("example11", "files=files/b.csv"));
	}
	r = decide("example11", "files=files/c.txt");
	CHECK(r->overall_code == OVER);
	sluice_rls_response_free(r);
	for (i = 0; i < 10; i++)
		sluice_rls_response_free(decide(
			"example11", "files_no_share=files_no_share/a.pdf"));
	r = decide("example11", "files_no_share=files_no_share/a.pdf");
	CHECK(r->overall_code == OVER);
	sluice_rls_response_free(r);
	r = decide("example11", "files_no_share=files_no_share/b.csv");
	CHECK(r->overall_code == OK);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 9);
	sluice_rls_response_free(r);
	stop();
}

/* ------------------------------------------------------- the protocol */

static void test_unknown_domain_and_unmatched_are_ok(void)
{
	sluice_rls_response_t *r;

	start(NULL, "messaging.yaml", example2);
	r = decide("nobody", "to_number=1");
	CHECK(r->overall_code == OK && !r->statuses[0].has_limit);
	sluice_rls_response_free(r);
	r = decide("messaging", "other=1|to_number=1");
	CHECK(r->overall_code == OK && !r->statuses[0].has_limit);
	CHECK(r->statuses[1].has_limit);
	sluice_rls_response_free(r);
	stop();
}

static void test_hits_addend_request_and_descriptor(void)
{
	sluice_rls_descriptor_t d = {.has_hits_addend = 1, .hits_addend = 7};
	sluice_rls_response_t *r;

	start(NULL, "messaging.yaml", example2);
	r = decide_ex("messaging", "to_number=1", 3, NULL);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 97);
	sluice_rls_response_free(r);
	/* The descriptor's own hits_addend beats the request's. */
	r = decide_ex("messaging", "to_number=1", 3, &d);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 90);
	sluice_rls_response_free(r);
	/* More than is left: refused, nothing taken. */
	d.hits_addend = 91;
	r = decide_ex("messaging", "to_number=1", 0, &d);
	CHECK(r->overall_code == OVER);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 90);
	sluice_rls_response_free(r);
	/* Any cost beyond the capacity is refused, the largest too. */
	d.hits_addend = UINT64_MAX;
	r = decide_ex("messaging", "to_number=1", 0, &d);
	CHECK(r->overall_code == OVER);
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 90);
	sluice_rls_response_free(r);
	stop();
}

/* RateLimitDescriptor.limit: used whenever the domain is configured,
 * matched or not (as envoyproxy/ratelimit), never shadow. */
static void test_request_supplied_limit(void)
{
	sluice_rls_descriptor_t d = {.has_limit = 1,
				     .limit_requests_per_unit = 2,
				     .limit_unit = SLUICE_RLS_UNIT_HOUR};
	sluice_rls_response_t *r;
	int i;

	start(NULL, "messaging.yaml", example2);
	for (i = 0; i < 3; i++) {
		r = decide_ex("messaging", "anything=x", 0, &d);
		CHECK(r->overall_code == (i < 2 ? OK : OVER));
		CHECK_EQ_U64(r->statuses[0].requests_per_unit, 2);
		CHECK(r->statuses[0].unit == SLUICE_RLS_UNIT_HOUR);
		sluice_rls_response_free(r);
	}
	/* An unconfigured domain: no limit at all. */
	r = decide_ex("nobody", "anything=x", 0, &d);
	CHECK(r->overall_code == OK && !r->statuses[0].has_limit);
	sluice_rls_response_free(r);
	stop();
}

/* A descriptor's own `limit` is a rate its caller chose: a flood of them
 * at 1/day (each bucket a day of debt) fills a full table, and the
 * stores evict such buckets among themselves, never a configured
 * descriptor's drained bucket. */
static void test_override_flood_resets_no_configured_bucket(void)
{
	sluice_rls_descriptor_t d = {.has_limit = 1,
				     .limit_requests_per_unit = 1,
				     .limit_unit = SLUICE_RLS_UNIT_DAY};
	sluice_rls_response_t *r;
	char spec[64];
	int i;

	store_keys = 2000;
	start(NULL, "tight.yaml",
	      "domain: tight\n"
	      "descriptors:\n"
	      "  - key: user\n"
	      "    rate_limit: {unit: day, requests_per_unit: 2}\n");
	for (i = 0; i < 3; i++) {
		r = decide("tight", "user=mallory");
		CHECK(r->overall_code == (i < 2 ? OK : OVER));
		sluice_rls_response_free(r);
	}
	for (i = 0; i < 6000; i++) {
		snprintf(spec, sizeof(spec), "fresh=%d", i);
		r = decide_ex("tight", spec, 0, &d);
		CHECK(r->overall_code == OK);
		sluice_rls_response_free(r);
	}
	r = decide("tight", "user=mallory");
	CHECK(r->overall_code == OVER);
	sluice_rls_response_free(r);
	stop();
	store_keys = 10000;
}

/* A reload as `sluice serve` does it: the directory read again into a
 * new config that learns the running one's limits (sluice_config_carry()). */
static void reload(void)
{
	char cfgtext[512], err[1024];
	sluice_config_t *cfg;

	snprintf(cfgtext, sizeof(cfgtext), "envoy:\n  config_dir: %s\n", dir);
	cfg = sluice_config_parse("sluice.yaml", cfgtext, strlen(cfgtext), err,
				  sizeof(err));
	CHECK(cfg != NULL);
	CHECK(sluice_config_carry(cfg, svc.live->cfg, sluice_now_us()) == 0);
	sluice_live_unref(svc.live);
	CHECK((svc.live = sluice_live_new(cfg)) != NULL);
}

static int passes(const char *domain, const char *spec)
{
	sluice_rls_response_t *r;
	int n = 0, over = 0;

	while (!over && n < 40) {
		r = decide(domain, spec);
		over = r->overall_code == OVER;
		n += !over;
		sluice_rls_response_free(r);
	}
	return n;
}

/* A descriptor's requests_per_unit (and unit) changed on reload: each
 * client keeps what it used -- a drained one stays over at the lowered
 * limit and gets only the difference of a raised one; a client never seen
 * before starts full. */
static void test_reload_keeps_descriptor_usage(void)
{
	start(NULL, "plan.yaml",
	      "domain: plan\n"
	      "descriptors:\n"
	      "  - key: user\n"
	      "    rate_limit: {unit: day, requests_per_unit: 5}\n");
	CHECK(passes("plan", "user=mallory") == 5);
	put("plan.yaml", "domain: plan\n"
			 "descriptors:\n"
			 "  - key: user\n"
			 "    rate_limit: {unit: day, requests_per_unit: 3}\n");
	reload();
	CHECK(passes("plan", "user=mallory") == 0);
	CHECK(passes("plan", "user=someone") == 3);
	put("plan.yaml",
	    "domain: plan\n"
	    "descriptors:\n"
	    "  - key: user\n"
	    "    rate_limit: {unit: hour, requests_per_unit: 8}\n");
	reload();
	/* 3 used (the lowered limit's capacity) of 8. */
	CHECK(passes("plan", "user=mallory") == 5);
	stop();
}

static void test_malformed_requests_are_refused(void)
{
	sluice_rls_request_t req = {.domain = ""};
	sluice_rls_entry_t e = {.key = NULL, .value = "v"};
	sluice_rls_descriptor_t d = {.entries = &e, .nentries = 1};
	char err[256];

	start(NULL, "messaging.yaml", example2);
	CHECK(sluice_rls_decide(&svc, &req, on_answer, NULL, err, sizeof(err)) <
	      0);
	CHECK(strstr(err, "domain must not be empty"));
	req.domain = "messaging";
	CHECK(sluice_rls_decide(&svc, &req, on_answer, NULL, err, sizeof(err)) <
	      0);
	CHECK(strstr(err, "descriptor list must not be empty"));
	req.descriptors = &d;
	req.ndescriptors = 1;
	CHECK(sluice_rls_decide(&svc, &req, on_answer, NULL, err, sizeof(err)) <
	      0);
	e.key = "k";
	d.has_limit = 1;
	d.limit_unit = SLUICE_RLS_UNIT_UNKNOWN;
	CHECK(sluice_rls_decide(&svc, &req, on_answer, NULL, err, sizeof(err)) <
	      0);
	CHECK(strstr(err, "unit"));
	stop();
}

static const char *header(const sluice_rls_response_t *r, const char *k)
{
	size_t i;

	for (i = 0; i < r->nheaders; i++)
		if (strcmp(r->headers[i].key, k) == 0)
			return r->headers[i].value;
	return NULL;
}

/* response_headers: envoyproxy/ratelimit's three headers, and nothing
 * else -- no name of the config reaches the client. */
static void test_response_headers_are_the_three(void)
{
	sluice_rls_response_t *r;

	start("  response_headers: true\n", "messaging.yaml", example2);
	r = decide("messaging",
		   "message_type=marketing,to_number=1|to_number=1");
	/* The descriptor nearest its limit: 4 of 5 left. */
	CHECK(r->nheaders == 3);
	CHECK(header(r, "RateLimit-Limit") &&
	      strcmp(header(r, "RateLimit-Limit"), "5") == 0);
	CHECK(strcmp(header(r, "RateLimit-Remaining"), "4") == 0);
	/* A bucket of 5 a day refills one token in 17280 s, and is full
	 * again that much later. */
	CHECK(strcmp(header(r, "RateLimit-Reset"), "17280") == 0);
	CHECK(!header(r, "RateLimit-Policy") && !header(r, "RateLimit"));
	sluice_rls_response_free(r);
	stop();
	start(NULL, "messaging.yaml", example2);
	r = decide("messaging", "to_number=1");
	CHECK(r->nheaders == 0);
	sluice_rls_response_free(r);
	stop();
}

/* ietf_headers: the draft-11 fields on their own, named by the limit's
 * `name` or "default" -- never by the descriptor's keys and values
 * unless ietf_policy_names: path. */
static void test_ietf_headers_hide_descriptor_names(void)
{
	static const char named[] =
		"domain: messaging\n"
		"descriptors:\n"
		"  - key: message_type\n"
		"    value: marketing\n"
		"    descriptors:\n"
		"      - key: to_number\n"
		"        rate_limit: {name: promo, unit: day, "
		"requests_per_unit: 5}\n"
		"  - key: to_number\n"
		"    rate_limit: {unit: day, requests_per_unit: 100}\n";
	sluice_rls_response_t *r;

	start("  ietf_headers: true\n", "messaging.yaml", example2);
	r = decide("messaging",
		   "message_type=marketing,to_number=1|to_number=1");
	CHECK(r->nheaders == 2 && !header(r, "RateLimit-Limit"));
	CHECK(strcmp(header(r, "RateLimit-Policy"),
		     "\"default\";q=5;w=86400") == 0);
	CHECK(strcmp(header(r, "RateLimit"), "\"default\";r=4;t=17280") == 0);
	sluice_rls_response_free(r);
	stop();
	start("  ietf_headers: true\n", "messaging.yaml", named);
	r = decide("messaging", "message_type=marketing,to_number=1");
	CHECK(strcmp(header(r, "RateLimit-Policy"), "\"promo\";q=5;w=86400") ==
	      0);
	sluice_rls_response_free(r);
	stop();
	start("  response_headers: true\n  ietf_headers: true\n"
	      "  ietf_policy_names: path\n",
	      "messaging.yaml", example2);
	r = decide("messaging",
		   "message_type=marketing,to_number=1|to_number=1");
	CHECK(r->nheaders == 5);
	CHECK(strcmp(header(r, "RateLimit-Policy"),
		     "\"messaging.message_type_marketing.to_number\";q=5;"
		     "w=86400") == 0);
	CHECK(strcmp(header(r, "RateLimit"),
		     "\"messaging.message_type_marketing.to_number\";r=4;"
		     "t=17280") == 0);
	sluice_rls_response_free(r);
	stop();
}

static void test_global_shadow_mode(void)
{
	sluice_rls_response_t *r;

	start("  shadow_mode: true\n", "e.yaml",
	      "domain: d\ndescriptors:\n  - key: k\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 1}\n");
	sluice_rls_response_free(decide("d", "k=1"));
	r = decide("d", "k=1");
	/* The status says what was decided; the answer is OK. */
	CHECK(r->statuses[0].code == OVER);
	CHECK(r->overall_code == OK);
	sluice_rls_response_free(r);
	stop();
}

/* quota_mode (envoyproxy/ratelimit's examples/ratelimit/config): the
 * answer is OVER_LIMIT only when every quota descriptor is over; each is
 * charged on its own. */
static void test_quota_mode(void)
{
	const char *both = "service=service_1|service=service_2";
	sluice_rls_response_t *r;

	start(NULL, "q.yaml",
	      "domain: rl\n"
	      "descriptors:\n"
	      "  - key: service\n"
	      "    value: service_1\n"
	      "    quota_mode: true\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	      "    metadata:\n"
	      "      service_with_quota: {name: service_1}\n"
	      "  - key: service\n"
	      "    value: service_2\n"
	      "    quota_mode: true\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 2}\n");
	r = decide("rl", both);
	CHECK(r->overall_code == OK);
	sluice_rls_response_free(r);
	r = decide("rl", both);
	/* service_1 is over, service_2 is not: OK, the status says it. */
	CHECK(r->statuses[0].code == OVER);
	CHECK(r->statuses[1].code == OK);
	CHECK(r->overall_code == OK);
	sluice_rls_response_free(r);
	r = decide("rl", both);
	CHECK(r->statuses[1].code == OVER);
	CHECK(r->overall_code == OVER);
	sluice_rls_response_free(r);
	stop();
}

/* quota_mode keeps all or nothing (docs/ENVOY.md): a refused request --
 * a normal descriptor over, or every quota one -- charges no descriptor,
 * quota ones included; an allowed one charges every descriptor but the
 * quota ones that are over. */
static void test_quota_mode_is_all_or_nothing(void)
{
	sluice_rls_response_t *r;
	int i;

	start(NULL, "q.yaml",
	      "domain: q\n"
	      "descriptors:\n"
	      "  - key: qa\n"
	      "    quota_mode: true\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	      "  - key: qb\n"
	      "    quota_mode: true\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
	      "  - key: qz\n"
	      "    quota_mode: true\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 0}\n"
	      "  - key: n\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 100}\n"
	      "  - key: small\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 1}\n");
	/* The only quota descriptor is over: refused, and the normal one
	 * is not charged (97, 96, 95 before). */
	r = decide("q", "qa=1|n=1");
	CHECK(r->overall_code == OK);
	CHECK_EQ_U64(r->statuses[1].limit_remaining, 99);
	sluice_rls_response_free(r);
	for (i = 0; i < 3; i++) {
		r = decide("q", "qa=1|n=1");
		CHECK(r->overall_code == OVER);
		CHECK(r->statuses[0].code == OVER);
		CHECK(r->statuses[1].code == OK);
		CHECK_EQ_U64(r->statuses[1].limit_remaining, 99);
		sluice_rls_response_free(r);
	}
	r = decide("q", "n=1");
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 98);
	sluice_rls_response_free(r);

	/* A normal descriptor over: the quota one is not charged. */
	r = decide("q", "small=2");
	CHECK(r->overall_code == OK);
	sluice_rls_response_free(r);
	for (i = 0; i < 3; i++) {
		r = decide("q", "small=2|qb=2");
		CHECK(r->overall_code == OVER);
		CHECK(r->statuses[1].code == OK);
		CHECK_EQ_U64(r->statuses[1].limit_remaining, 10);
		sluice_rls_response_free(r);
	}
	r = decide("q", "qb=2");
	CHECK_EQ_U64(r->statuses[0].limit_remaining, 9);
	sluice_rls_response_free(r);

	/* One quota descriptor over, another not: allowed, and everything
	 * but the one over is charged. */
	r = decide("q", "qa=3");
	CHECK(r->overall_code == OK);
	sluice_rls_response_free(r);
	for (i = 0; i < 3; i++) {
		r = decide("q", "qa=3|qb=3|n=3");
		CHECK(r->overall_code == OK);
		CHECK(r->statuses[0].code == OVER);
		CHECK(r->statuses[1].code == OK);
		CHECK_EQ_U64(r->statuses[1].limit_remaining, 9 - i);
		CHECK_EQ_U64(r->statuses[2].limit_remaining, 99 - i);
		sluice_rls_response_free(r);
	}

	/* A quota descriptor that is always over (requests_per_unit 0),
	 * alone among the quota ones: refused, nothing charged. */
	for (i = 0; i < 3; i++) {
		r = decide("q", "qz=4|n=4");
		CHECK(r->overall_code == OVER);
		CHECK(r->statuses[0].code == OVER);
		CHECK_EQ_U64(r->statuses[1].limit_remaining, 100);
		sluice_rls_response_free(r);
	}
	/* Beside a quota descriptor that passes: allowed and charged. */
	r = decide("q", "qz=5|qb=5|n=5");
	CHECK(r->overall_code == OK);
	CHECK(r->statuses[0].code == OVER);
	CHECK_EQ_U64(r->statuses[1].limit_remaining, 9);
	CHECK_EQ_U64(r->statuses[2].limit_remaining, 99);
	sluice_rls_response_free(r);
	stop();
}

/* The hits counters add what a descriptor was charged, clamped as the
 * store sees it (capacity + 1): a client's hits_addend near 2^64 neither
 * wraps them nor runs them to their end. */
static void test_hit_counters_never_wrap(void)
{
	sluice_rls_descriptor_t d = {.has_hits_addend = 1,
				     .hits_addend = UINT64_MAX / 2 + 1};
	sluice_envoy_series_t *s;
	sluice_rls_response_t *r;
	int i;

	start(NULL, "h.yaml",
	      "domain: hits\n"
	      "descriptors:\n"
	      "  - key: k\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 10}\n");
	s = sluice_envoy_series("hits", "k");
	CHECK(s->total_hits == 0);
	for (i = 0; i < 3; i++) {
		r = decide_ex("hits", "k=v", 0, &d);
		CHECK(r->overall_code == OVER);
		sluice_rls_response_free(r);
	}
	CHECK_EQ_U64(s->total_hits, 3 * 11);
	CHECK_EQ_U64(s->over_limit, 3 * 11);
	/* And a counter at its end stays there. */
	s->total_hits = UINT64_MAX - 1;
	r = decide("hits", "k=v");
	CHECK(r->overall_code == OK);
	sluice_rls_response_free(r);
	r = decide("hits", "k=v");
	sluice_rls_response_free(r);
	CHECK(s->total_hits == UINT64_MAX);
	stop();
}

/* A store that fails every take. */
static int failing_take(void *impl, sluice_take_item_t *items, size_t n,
			int64_t now_us, sluice_store_cb cb, void *arg)
{
	(void)impl;
	(void)items;
	(void)n;
	(void)now_us;
	cb(arg, SLUICE_ESTORE, 0);
	return 0;
}

static const sluice_store_ops_t failing_ops = {.name = "failing",
					       .take = failing_take};

/* Envoy's store failures count in sluice_store_errors_total (its rule
 * "envoy"), one per descriptor the store failed on, as a rule's do. */
static void test_store_failures_are_counted(void)
{
	sluice_rls_response_t *r;
	uint16_t slot = sluice_metrics_slot("envoy");

	start("  on_store_error: open\n", "f.yaml",
	      "domain: f\n"
	      "descriptors:\n"
	      "  - key: a\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
	      "  - key: b\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 10}\n");
	CHECK((svc.metrics = sluice_metrics_new()) != NULL);
	svc.backend.ops = &failing_ops;
	r = decide("f", "a=1|b=1|c=1");
	CHECK(r->overall_code == OK);
	sluice_rls_response_free(r);
	CHECK_EQ_U64(svc.metrics->store_errors[slot], 2);
	r = decide("f", "a=1");
	sluice_rls_response_free(r);
	CHECK_EQ_U64(svc.metrics->store_errors[slot], 3);
	sluice_backend_memory(&svc.backend, store);
	stop();
}

/* The line of `series` in a ratelimit-style exposition, its count; -1
 * when absent; it must be there once at most. */
static long long metric(const char *series)
{
	sluice_buf_t out = {0};
	char *p, *nl;
	long long v = -1;
	size_t n = strlen(series);

	sluice_envoy_metrics_render(&out,
				    SLUICE_ENVOY_METRICS_SLUICE |
					    SLUICE_ENVOY_METRICS_RATELIMIT);
	sluice_buf_append(&out, "", 1);
	CHECK(!out.oom);
	for (p = out.data; p && *p; p = nl ? nl + 1 : NULL) {
		nl = strchr(p, '\n');
		if (strncmp(p, series, n) == 0 && p[n] == ' ') {
			CHECK(v == -1); /* never twice */
			v = atoll(p + n + 1);
		}
	}
	sluice_buf_free(&out);
	return v;
}

/* envoy.metrics: ratelimit -- the series a statsd_exporter with
 * envoyproxy/ratelimit's default mapping shows: one and two levels as
 * {domain,key1[,key2]}, deeper ones under their escaped statsd name;
 * within_limit, domain_not_found, global_shadow_mode counted. */
static void test_ratelimit_metric_names(void)
{
	static const char deep[] =
		"domain: mnames\n"
		"descriptors:\n"
		"  - key: a\n"
		"    descriptors:\n"
		"      - key: b\n"
		"        rate_limit: {unit: day, requests_per_unit: 1}\n"
		"        descriptors:\n"
		"          - key: c\n"
		"            rate_limit: {unit: day, requests_per_unit: 5}\n"
		"  - key: k\n"
		"    rate_limit: {unit: day, requests_per_unit: 1}\n";
	sluice_rls_response_t *r;
	long long shadow_before =
		metric("sluice_envoy_global_shadow_mode_total");

	start("  metrics: ratelimit\n  shadow_mode: true\n", "m.yaml", deep);
	sluice_rls_response_free(decide("mnames", "k=1"));
	sluice_rls_response_free(decide("mnames", "k=1")); /* over */
	sluice_rls_response_free(decide("mnames", "a=x,b=y"));
	sluice_rls_response_free(decide("mnames", "a=x,b=y,c=z"));
	sluice_rls_response_free(decide("mnames_nowhere", "k=1|k=2"));
	r = decide("mnames", "k=1");
	CHECK(r->overall_code == OK); /* shadow_mode: OK, and counted */
	sluice_rls_response_free(r);
	CHECK(metric("ratelimit_service_rate_limit_total_hits"
		     "{domain=\"mnames\",key1=\"k\"}") == 3);
	CHECK(metric("ratelimit_service_rate_limit_within_limit"
		     "{domain=\"mnames\",key1=\"k\"}") == 1);
	CHECK(metric("ratelimit_service_rate_limit_over_limit"
		     "{domain=\"mnames\",key1=\"k\"}") == 2);
	CHECK(metric("ratelimit_service_rate_limit_total_hits"
		     "{domain=\"mnames\",key1=\"a\",key2=\"b\"}") == 1);
	CHECK(metric("ratelimit_service_rate_limit_a_b_c_total_hits") == -1);
	CHECK(metric("ratelimit_service_rate_limit_mnames_a_b_c_total_hits") ==
	      1);
	CHECK(metric("ratelimit_service_rate_limit_mnames_nowhere_domain_not_"
		     "found") == 2);
	CHECK(metric("sluice_envoy_domain_not_found_total"
		     "{domain=\"mnames_nowhere\"}") == 2);
	CHECK(metric("sluice_envoy_within_limit_total"
		     "{domain=\"mnames\",descriptor=\"k\"}") == 1);
	CHECK(metric("ratelimit_service_global_shadow_mode") >= 1);
	CHECK(metric("sluice_envoy_global_shadow_mode_total") ==
	      (shadow_before < 0 ? 0 : shadow_before) + 2);
	stop();
}

/* Two stats whose statsd_exporter names are one ("a.b_c" and "a_b.c"
 * both escape to ..._a_b_c_...) are one series, summed: never a line
 * twice, which would make a scraper refuse the whole page. */
static void test_ratelimit_names_that_collide_are_summed(void)
{
	sluice_envoy_add(&sluice_envoy_series("mcoll", "a.b_c.d")->total_hits,
			 2);
	sluice_envoy_add(&sluice_envoy_series("mcoll", "a_b.c.d")->total_hits,
			 3);
	CHECK(metric("ratelimit_service_rate_limit_mcoll_a_b_c_d_total_hits") ==
	      5);
}

int main(void)
{
	RUN(test_example2_marketing_five_a_day);
	RUN(test_example3_blacklisted_address);
	RUN(test_example4_depth);
	RUN(test_example5_unlimited);
	RUN(test_example6_shadow_mode);
	RUN(test_example7_replaces);
	RUN(test_example11_share_threshold);
	RUN(test_unlimited_is_not_replaced);
	RUN(test_unknown_domain_and_unmatched_are_ok);
	RUN(test_hits_addend_request_and_descriptor);
	RUN(test_request_supplied_limit);
	RUN(test_override_flood_resets_no_configured_bucket);
	RUN(test_reload_keeps_descriptor_usage);
	RUN(test_malformed_requests_are_refused);
	RUN(test_response_headers_are_the_three);
	RUN(test_ietf_headers_hide_descriptor_names);
	RUN(test_ratelimit_metric_names);
	RUN(test_ratelimit_names_that_collide_are_summed);
	RUN(test_global_shadow_mode);
	RUN(test_quota_mode);
	RUN(test_quota_mode_is_all_or_nothing);
	RUN(test_hit_counters_never_wrap);
	RUN(test_store_failures_are_counted);
	TESTS_DONE();
}
