/*
 * test_envoy_rls_answers.c -- what the RLS engine's answers carry: the
 * response headers (three, IETF ones that hide descriptor names), global
 * shadow mode, quota mode (all or nothing), hit counters that never wrap,
 * store failures counted, and envoyproxy/ratelimit's metric names.
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
