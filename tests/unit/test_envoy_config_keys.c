/*
 * test_envoy_config_keys.c -- sluice's extensions to envoyproxy/ratelimit's
 * YAML (burst, several limits, any requests_per_unit, replaces cycles),
 * bucket keys that are injective and shared by pattern, and metric paths
 * and labels as upstream's.
 */
#include "check.h"
#include "envoy_config_test.h"
#include "policy/envoy/config.h"
#include "policy/envoy/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ----------------------------------------------------------- extensions */

static void test_burst_and_several_limits(void)
{
	sluice_envoy_config_t *cfg;
	sluice_envoy_match_t m;
	const sluice_envoy_node_t *n;

	new_dir();
	put("x.yaml", "domain: d\ndescriptors:\n"
		      "  - key: a\n    rate_limit: {unit: minute, "
		      "requests_per_unit: 60, burst: 10}\n"
		      "  - key: b\n    rate_limit:\n      limits:\n"
		      "        - {unit: second, requests_per_unit: 5}\n"
		      "        - {unit: hour, requests_per_unit: 1000}\n"
		      "  - key: c\n    rate_limit: {unit: week, "
		      "requests_per_unit: 7}\n");
	CHECK((cfg = load()) != NULL);
	n = lookup(cfg, "d", "a=1", &m);
	CHECK(n && n->limit->set.nlimits == 1);
	CHECK_EQ_U64(n->limit->set.limits[0].capacity, 10);
	/* one token a second */
	CHECK_EQ_U64(n->limit->set.limits[0].rate.interval /
			     n->limit->set.limits[0].rate.per,
		     1000000);
	n = lookup(cfg, "d", "b=1", &m);
	CHECK(n && n->limit->set.nlimits == 2);
	CHECK_EQ_U64(n->limit->set.limits[1].capacity, 1000);
	CHECK(n->limit->units[1].unit == SLUICE_RLS_UNIT_HOUR);
	n = lookup(cfg, "d", "c=1", &m);
	CHECK(n && n->limit->units[0].unit == SLUICE_RLS_UNIT_WEEK);
	sluice_envoy_config_free(cfg);
	rm_dir();
	refused("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n"
		"      unit: second\n      limits: [{unit: second, "
		"requests_per_unit: 1}]\n",
		5, "unit beside limits");
}

/* A replaces cycle would drop every limit of it from a request that
 * matches them all: refused, each limit of the cycle named with its file
 * and line; a chain that runs one way loads. */
static void test_replaces_cycle_is_refused(void)
{
	const char *two = "domain: d\n"
			  "descriptors:\n"
			  "  - key: k1\n"
			  "    rate_limit:\n"
			  "      name: a\n"
			  "      replaces: [{name: b}]\n"
			  "      unit: hour\n"
			  "      requests_per_unit: 5\n"
			  "  - key: k2\n"
			  "    rate_limit:\n"
			  "      name: b\n"
			  "      replaces: [{name: a}]\n"
			  "      unit: hour\n"
			  "      requests_per_unit: 10\n";
	const char *three = "domain: d\n"
			    "descriptors:\n"
			    "  - key: k0\n"
			    "    rate_limit: {unit: hour, requests_per_unit: 1,"
			    " replaces: [{name: a}]}\n"
			    "  - key: k1\n"
			    "    descriptors:\n"
			    "      - key: x\n"
			    "        rate_limit: {name: a, unit: hour, "
			    "requests_per_unit: 1, replaces: [{name: b}]}\n"
			    "  - key: k2\n"
			    "    rate_limit: {name: b, unit: hour, "
			    "requests_per_unit: 1, replaces: [{name: c}]}\n"
			    "  - key: k3\n"
			    "    rate_limit: {name: c, unit: hour, "
			    "requests_per_unit: 1, replaces: [{name: a}]}\n";
	const char *chain = "domain: d\n"
			    "descriptors:\n"
			    "  - key: k1\n"
			    "    rate_limit: {name: a, unit: hour, "
			    "requests_per_unit: 1, replaces: [{name: b}]}\n"
			    "  - key: k2\n"
			    "    rate_limit: {name: b, unit: hour, "
			    "requests_per_unit: 1, replaces: [{name: c}]}\n"
			    "  - key: k3\n"
			    "    rate_limit: {name: c, unit: hour, "
			    "requests_per_unit: 1}\n";
	sluice_envoy_config_t *cfg;

	refused(two, 3, "rate_limit 'a' replaces 'b', and replaces lead back");
	CHECK(nerr == 2);
	CHECK(strstr(report, "bad.yaml:9: rate_limit 'b' replaces 'a'"));
	/* Three long, one of them nested; k0 replaces into it but is not
	 * on it. */
	refused(three, 7, "rate_limit 'a' replaces 'b'");
	CHECK(nerr == 3);
	new_dir();
	put("ok.yaml", chain);
	CHECK((cfg = load()) != NULL);
	sluice_envoy_config_free(cfg);
	rm_dir();
}

/* Every requests_per_unit envoyproxy/ratelimit takes loads (any uint32):
 * one sluice cannot hold exactly is rounded to the nearest interval it
 * can; above 10^9 a second the bucket keeps its capacity and refills at
 * 10^9 a second, the finest rate (a token every 1/1000 us). */
static void test_any_requests_per_unit_loads(void)
{
	static const uint32_t ns[] = {1,	   7,	       1001,
				      9999,	   65537,      1000000,
				      123456789,   1000000000, 1000000001,
				      3000000000u, UINT32_MAX};
	size_t i, u;
	char msg[256];

	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
		for (u = SLUICE_RLS_UNIT_SECOND; u <= SLUICE_RLS_UNIT_WEEK;
		     u++) {
			sluice_limit_t l;
			uint64_t secs =
				sluice_envoy_unit_seconds((sluice_rls_unit_t)u);
			double want, got;

			if (sluice_envoy_limit_make(ns[i], (sluice_rls_unit_t)u,
						    0, &l, msg,
						    sizeof(msg)) != 0) {
				fprintf(stderr, "%u per unit %zu: %s\n", ns[i],
					u, err);
				CHECK(0);
			}
			CHECK_EQ_U64(l.capacity, ns[i]);
			if (ns[i] > 1000000000ull * secs) {
				/* finer than 1 ns a token: the finest rate */
				CHECK_EQ_U64(l.rate.interval, 1);
				CHECK_EQ_U64(l.rate.per, 1000);
				continue;
			}
			want = (double)secs * 1e6 / ns[i];
			got = (double)l.rate.interval / l.rate.per;
			/* within 0.1%, or half a nanosecond (the finest
			 * step) a token */
			CHECK(got - want <= want * 0.001 + 0.0005 &&
			      want - got <= want * 0.001 + 0.0005);
		}
}

/* -------------------------------------------------------------- keys */

static void test_keys_are_injective_and_shared_by_pattern(void)
{
	sluice_rls_entry_t a[] = {{"a", "b:c"}}, b[] = {{"a:b", "c"}},
			   c[] = {{"a", "b"}, {"c", ""}}, d[] = {{"a", "bc"}};
	char k1[SLUICE_KEY_MAX], k2[SLUICE_KEY_MAX];
	sluice_envoy_config_t *cfg;
	sluice_envoy_match_t m1, m2;

	sluice_envoy_key("dom", a, 1, NULL, k1);
	sluice_envoy_key("dom", b, 1, NULL, k2);
	CHECK(strcmp(k1, k2) != 0);
	sluice_envoy_key("dom", c, 2, NULL, k1);
	sluice_envoy_key("dom", d, 1, NULL, k2);
	CHECK(strcmp(k1, k2) != 0);
	sluice_envoy_key("do", a, 1, NULL, k1);
	sluice_envoy_key("dom", a, 1, NULL, k2);
	CHECK(strcmp(k1, k2) != 0);
	CHECK(strncmp(k1, "envoy:\x1f", 7) == 0);

	/* README Example 11: share_threshold shares one bucket. */
	new_dir();
	put("x.yaml", "domain: example11\ndescriptors:\n"
		      "  - key: files\n    value: files/*\n"
		      "    share_threshold: true\n"
		      "    rate_limit: {unit: hour, requests_per_unit: 10}\n"
		      "  - key: files_no_share\n"
		      "    value: files_no_share/*\n"
		      "    rate_limit: {unit: hour, requests_per_unit: 10}\n");
	CHECK((cfg = load()) != NULL);
	{
		sluice_rls_entry_t x[] = {{"files", "files/a.pdf"}},
				   y[] = {{"files", "files/b.csv"}},
				   lit[] = {{"files", "files/*"}},
				   p[] = {{"files_no_share",
					   "files_no_share/a.pdf"}},
				   q[] = {{"files_no_share",
					   "files_no_share/b.csv"}};
		sluice_envoy_match(sluice_envoy_domain(cfg, "example11"), x, 1,
				   &m1);
		sluice_envoy_match(sluice_envoy_domain(cfg, "example11"), y, 1,
				   &m2);
		sluice_envoy_key("example11", x, 1, &m1, k1);
		sluice_envoy_key("example11", y, 1, &m2, k2);
		CHECK(strcmp(k1, k2) == 0);
		/* A value spelled like the pattern, but not shared, has a
		 * key of its own (':' and '*' mark the two). */
		sluice_envoy_match(sluice_envoy_domain(cfg, "example11"), lit,
				   1, &m2);
		m2.shared[0] = NULL;
		sluice_envoy_key("example11", lit, 1, &m2, k2);
		CHECK(strcmp(k1, k2) != 0);
		sluice_envoy_match(sluice_envoy_domain(cfg, "example11"), p, 1,
				   &m1);
		sluice_envoy_match(sluice_envoy_domain(cfg, "example11"), q, 1,
				   &m2);
		sluice_envoy_key("example11", p, 1, &m1, k1);
		sluice_envoy_key("example11", q, 1, &m2, k2);
		CHECK(strcmp(k1, k2) != 0);
	}
	sluice_envoy_config_free(cfg);
	rm_dir();
}

/* ------------------------------------------------------------ metrics */

static void test_metric_paths_as_upstream(void)
{
	sluice_envoy_config_t *cfg;
	sluice_envoy_match_t m;
	sluice_envoy_series_t *s;
	sluice_rls_entry_t e10[] = {{"route", "api"},
				    {"http_method", "GET"},
				    {"subject_id", "123"}};
	sluice_rls_entry_t e8[] = {{"key1", "unspecified_value"}};
	sluice_rls_entry_t e2[] = {{"message_type", "marketing"},
				   {"to_number", "2061111111"}};

	new_dir();
	/* README Examples 2, 8 and 10 */
	put("x.yaml", "domain: messaging\ndescriptors:\n"
		      "  - key: message_type\n    value: marketing\n"
		      "    descriptors:\n      - key: to_number\n"
		      "        rate_limit: {unit: day, requests_per_unit: 5}\n"
		      "  - key: to_number\n"
		      "    rate_limit: {unit: day, requests_per_unit: 100}\n");
	put("y.yaml",
	    "domain: example8\ndescriptors:\n"
	    "  - key: key1\n    detailed_metric: true\n"
	    "    rate_limit: {unit: minute, requests_per_unit: 10}\n"
	    "  - key: key1\n    value: value1\n"
	    "    rate_limit: {unit: minute, requests_per_unit: 20}\n");
	put("z.yaml",
	    "domain: example10\ndescriptors:\n"
	    "  - key: route\n    value_to_metric: true\n"
	    "    descriptors:\n"
	    "      - key: http_method\n        value_to_metric: true\n"
	    "        descriptors:\n          - key: subject_id\n"
	    "            rate_limit: {unit: minute, "
	    "requests_per_unit: 60}\n");
	CHECK((cfg = load()) != NULL);
	sluice_envoy_match(sluice_envoy_domain(cfg, "messaging"), e2, 2, &m);
	s = sluice_envoy_match_series("messaging", e2, 2, &m);
	CHECK(s && strcmp(s->path, "message_type_marketing.to_number") == 0);
	sluice_envoy_match(sluice_envoy_domain(cfg, "example8"), e8, 1, &m);
	s = sluice_envoy_match_series("example8", e8, 1, &m);
	CHECK(s && strcmp(s->path, "key1_unspecified_value") == 0);
	sluice_envoy_match(sluice_envoy_domain(cfg, "example10"), e10, 3, &m);
	s = sluice_envoy_match_series("example10", e10, 3, &m);
	CHECK(s &&
	      strcmp(s->path, "route_api.http_method_GET.subject_id") == 0);
	CHECK(strcmp(s->domain, "example10") == 0);
	sluice_envoy_config_free(cfg);
	rm_dir();
}

/* detailed_metric puts a client's value into a series' label: values of
 * 60 KB made 578 MB of series and a 2.4 GB /metrics.  A label is kept to
 * SLUICE_ENVOY_MAX_LABEL bytes (values differing past the head still
 * count apart, by a hash suffix), the registry's label bytes to
 * SLUICE_ENVOY_MAX_SERIES_BYTES, and the rendering follows. */
static void test_detailed_metric_labels_are_bounded(void)
{
	enum { VLEN = 60000, NLONG = 300 };
	sluice_envoy_series_t *first = NULL, *s;
	sluice_envoy_config_t *cfg;
	sluice_envoy_match_t m;
	sluice_rls_entry_t e[1];
	char *v = malloc(VLEN + 16), shortv[256];
	sluice_buf_t out = {0};
	size_t i, before;

	CHECK(v != NULL);
	new_dir();
	put("d.yaml",
	    "domain: big\ndescriptors:\n"
	    "  - key: k\n    detailed_metric: true\n"
	    "    rate_limit: {unit: minute, requests_per_unit: 10}\n");
	cfg = load();
	CHECK(cfg != NULL);
	memset(v, 'v', VLEN);
	e[0].key = "k";
	e[0].value = v;
	for (i = 0; i < NLONG; i++) {
		snprintf(v + VLEN, 16, "%zu", i); /* only the tail differs */
		sluice_envoy_match(sluice_envoy_domain(cfg, "big"), e, 1, &m);
		s = sluice_envoy_match_series("big", e, 1, &m);
		CHECK(strlen(s->path) <= SLUICE_ENVOY_MAX_LABEL);
		CHECK(strcmp(s->path, "_overflow") != 0);
		if (i == 0)
			first = s;
		else
			CHECK(s != first); /* apart, by the hash suffix */
	}
	sluice_envoy_metrics_render(&out,
				    SLUICE_ENVOY_METRICS_SLUICE |
					    SLUICE_ENVOY_METRICS_RATELIMIT);
	CHECK(!out.oom);
	/* 5 counters a series in each of 2 namings, each line a label of
	 * at most 200 bytes and some 100 of names and count. */
	CHECK(out.len < 2 * 5 * (NLONG + 100) * (SLUICE_ENVOY_MAX_LABEL + 100));
	sluice_buf_free(&out);
	/* The bytes: 200-byte values until the registry is full, then
	 * overflow, well before the count of series runs out. */
	before = sluice_envoy_series_bytes();
	CHECK(before <= SLUICE_ENVOY_MAX_SERIES_BYTES);
	memset(shortv, 'w', 190);
	e[0].value = shortv;
	for (i = 0; i < 6000; i++) {
		snprintf(shortv + 190, 16, "%zu", i);
		sluice_envoy_match(sluice_envoy_domain(cfg, "big"), e, 1, &m);
		s = sluice_envoy_match_series("big", e, 1, &m);
		CHECK(sluice_envoy_series_bytes() <=
		      SLUICE_ENVOY_MAX_SERIES_BYTES);
	}
	CHECK(strcmp(s->path, "_overflow") == 0);
	free(v);
	sluice_envoy_config_free(cfg);
	rm_dir();
}

int main(void)
{
	RUN(test_burst_and_several_limits);
	RUN(test_any_requests_per_unit_loads);
	RUN(test_replaces_cycle_is_refused);
	RUN(test_keys_are_injective_and_shared_by_pattern);
	RUN(test_metric_paths_as_upstream);
	RUN(test_detailed_metric_labels_are_bounded);
	TESTS_DONE();
}
