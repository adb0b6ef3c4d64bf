/*
 * test_envoy_rls.c -- the RLS engine through its C API (src/policy/envoy/rls.h)
 * on the memory store: envoyproxy/ratelimit's README examples answered as
 * there (or, where a token bucket answers otherwise, as a bucket does,
 * said at each place), all-or-nothing across descriptors, shadow_mode,
 * unlimited, replaces, request-supplied limits, hits_addend, reloads and
 * malformed requests.  What an answer carries (headers, modes, counters,
 * metrics): test_envoy_rls_answers.c.
 *
 * Limits here are per hour or per day, so the few microseconds a test
 * runs refill nothing a whole token would show.
 */
#include "check.h"
#include "envoy_rls_test.h"
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

/* --------------------------------------------------------- the README */

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
	TESTS_DONE();
}
