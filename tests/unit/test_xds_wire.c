/*
 * test_xds_wire.c -- the xDS client's messages (src/xds/xds_wire.c): a
 * DiscoveryResponse's RateLimitConfigs become the Envoy loader's config
 * with every string exactly as sent (no value can inject YAML of its
 * own), units as envoyproxy/ratelimit reads them, nesting bounded on the
 * wire; every prefix of a response and garbage decode to an error, never
 * a crash; the DiscoveryRequest carries node, type, version, nonce and,
 * for a NACK, the error; the call's headers end with envoy.xds.headers.
 */
#include "check.h"
#include "policy/envoy/config.h"
#include "xds/xds.h"

#include "envoy/service/discovery/v3/discovery.pb-c.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb-c.h"

#include <stdlib.h>
#include <string.h>

typedef Ratelimit__Config__Ratelimit__V3__RateLimitDescriptor desc_t;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitPolicy policy_t;
typedef Ratelimit__Config__Ratelimit__V3__RateLimitConfig rlconf_t;

static void desc_init(desc_t *d, const char *key, const char *value,
		      policy_t *p)
{
	ratelimit__config__ratelimit__v3__rate_limit_descriptor__init(d);
	d->key = (char *)key;
	d->value = (char *)value;
	d->rate_limit = p;
}

static void policy_init(policy_t *p, int unit, uint32_t rpu, int unlimited)
{
	ratelimit__config__ratelimit__v3__rate_limit_policy__init(p);
	p->unit = (Ratelimit__Config__Ratelimit__V3__RateLimitUnit)unit;
	p->requests_per_unit = rpu;
	p->unlimited = unlimited;
}

/* A DiscoveryResponse holding one RateLimitConfig (domain, descriptors);
 * *len its size. */
static uint8_t *response(const char *domain, desc_t **d, size_t n, size_t *len)
{
	Envoy__Service__Discovery__V3__DiscoveryResponse r =
		ENVOY__SERVICE__DISCOVERY__V3__DISCOVERY_RESPONSE__INIT;
	Google__Protobuf__Any any = GOOGLE__PROTOBUF__ANY__INIT, *anys[1];
	rlconf_t c = RATELIMIT__CONFIG__RATELIMIT__V3__RATE_LIMIT_CONFIG__INIT;
	uint8_t *out, *inner;
	size_t ilen;

	c.name = "cfg";
	c.domain = (char *)domain;
	c.descriptors = d;
	c.n_descriptors = n;
	ilen = ratelimit__config__ratelimit__v3__rate_limit_config__get_packed_size(
		&c);
	inner = malloc(ilen + 1);
	CHECK(inner != NULL);
	ratelimit__config__ratelimit__v3__rate_limit_config__pack(&c, inner);
	out = NULL;
	any.type_url = SLUICE_XDS_TYPE_URL;
	any.value.data = inner;
	any.value.len = ilen;
	anys[0] = &any;
	r.version_info = "v1";
	r.nonce = "n1";
	r.type_url = SLUICE_XDS_TYPE_URL;
	r.resources = anys;
	r.n_resources = 1;
	*len = envoy__service__discovery__v3__discovery_response__get_packed_size(
		&r);
	out = malloc(*len + 1);
	CHECK(out != NULL);
	envoy__service__discovery__v3__discovery_response__pack(&r, out);
	free(inner);
	return out;
}

/* Decodes and loads; NULL with err after an error. */
static sluice_envoy_config_t *load(const uint8_t *msg, size_t len, char *err,
				   size_t errlen)
{
	sluice_envoy_settings_t s;
	sluice_xds_response_t r;
	sluice_envoy_config_t *cfg = NULL;

	sluice_envoy_settings_init(&s);
	if (sluice_xds_decode(msg, len, &r, err, errlen) == 0)
		cfg = sluice_envoy_load_texts(r.texts, r.ntexts, &s, err,
					      errlen);
	sluice_xds_response_free(&r);
	return cfg;
}

static void test_strings_arrive_exactly(void)
{
	static const char *const evil[] = {
		"a\"\n  rate_limit: {unit: second, requests_per_unit: 1}\nx: "
		"\"",
		"back\\slash 'single' \"double\" #hash: colon",
		"\t\r\x01\x1f ctrl", "h\xc3\xa9llo \xe2\x9c\x93", "*"};
	size_t i, len;

	for (i = 0; i < sizeof(evil) / sizeof(evil[0]); i++) {
		desc_t d, *dp = &d;
		policy_t p;
		uint8_t *msg;
		sluice_envoy_config_t *cfg;
		const sluice_envoy_domain_t *dom;
		char err[512];

		policy_init(&p, 2, 7, 0);
		desc_init(&d, evil[i], evil[i], &p);
		msg = response(evil[i], &dp, 1, &len);
		cfg = load(msg, len, err, sizeof(err));
		if (!cfg)
			fprintf(stderr, "%s\n", err);
		CHECK(cfg != NULL);
		CHECK_EQ_U64(cfg->ndomains, 1);
		dom = sluice_envoy_domain(cfg, evil[i]);
		CHECK(dom != NULL);
		CHECK_EQ_U64(dom->nchildren, 1);
		CHECK(strcmp(dom->children[0].key, evil[i]) == 0);
		CHECK(strcmp(dom->children[0].value, evil[i]) == 0);
		CHECK(dom->children[0].limit != NULL);
		CHECK_EQ_U64(dom->children[0].limit->units[0].requests_per_unit,
			     7);
		CHECK(dom->children[0].limit->units[0].unit ==
		      SLUICE_RLS_UNIT_MINUTE);
		sluice_envoy_config_free(cfg);
		free(msg);
	}
}

static void test_units_as_envoyproxy_reads_them(void)
{
	static const struct {
		int unit, unlimited;
		uint32_t rpu;
		const char *err; /* NULL: loads */
	} cases[] = {
		{0, 1, 0, NULL}, /* unlimited: no unit */
		{7, 0, 3, NULL}, /* WEEK is 7 on the wire */
		{0, 0, 5, "invalid rate limit unit"},
		{1, 1, 0, "should not specify rate limit unit"},
		{9, 0, 5, "invalid rate limit unit"},
		{1, 0, 0, NULL}, /* 0 per unit: every request over */
	};
	size_t i, len;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		desc_t d, *dp = &d;
		policy_t p;
		uint8_t *msg;
		sluice_envoy_config_t *cfg;
		char err[512] = "";

		policy_init(&p, cases[i].unit, cases[i].rpu,
			    cases[i].unlimited);
		desc_init(&d, "k", "", &p);
		msg = response("d", &dp, 1, &len);
		cfg = load(msg, len, err, sizeof(err));
		if (cases[i].err) {
			CHECK(cfg == NULL);
			CHECK(strstr(err, cases[i].err) != NULL);
			CHECK(strncmp(err, "xds:cfg:", 8) == 0);
		} else {
			CHECK(cfg != NULL);
			CHECK(cfg->domains[0].children[0].value == NULL);
			if (cases[i].unit == 7)
				CHECK(cfg->domains[0]
					      .children[0]
					      .limit->units[0]
					      .unit == SLUICE_RLS_UNIT_WEEK);
		}
		sluice_envoy_config_free(cfg);
		free(msg);
	}
}

/* depth levels of descriptors, the deepest with a limit. */
static uint8_t *nested(size_t depth, size_t *len)
{
	desc_t *d = calloc(depth, sizeof(*d));
	desc_t **up = calloc(depth, sizeof(*up));
	policy_t p;
	uint8_t *msg;
	size_t i;

	CHECK(d && up);
	policy_init(&p, 1, 1, 0);
	for (i = 0; i < depth; i++) {
		desc_init(&d[i], "k", "", i + 1 == depth ? &p : NULL);
		up[i] = &d[i];
		if (i) {
			d[i - 1].descriptors = &up[i];
			d[i - 1].n_descriptors = 1;
		}
	}
	msg = response("deep", &up[0], 1, len);
	free(d);
	free(up);
	return msg;
}

static void test_nesting_is_bounded(void)
{
	sluice_envoy_config_t *cfg;
	uint8_t *msg;
	size_t len;
	char err[512];

	/* 15 levels: what a YAML file can hold too. */
	msg = nested(SLUICE_ENVOY_MAX_DEPTH - 1, &len);
	cfg = load(msg, len, err, sizeof(err));
	if (!cfg)
		fprintf(stderr, "%s\n", err);
	CHECK(cfg != NULL);
	sluice_envoy_config_free(cfg);
	free(msg);
	msg = nested(SLUICE_ENVOY_MAX_DEPTH, &len);
	CHECK(load(msg, len, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "nested more than 15 deep") != NULL);
	free(msg);
	msg = nested(5000, &len);
	CHECK(load(msg, len, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "nested") != NULL);
	free(msg);
}

static void test_prefixes_and_garbage_are_errors(void)
{
	desc_t d[2], *dp[2] = {&d[0], &d[1]};
	policy_t p;
	uint8_t *msg, junk[64];
	size_t len, i;
	char err[512];
	sluice_envoy_config_t *cfg;

	policy_init(&p, 3, 9, 0);
	desc_init(&d[0], "a", "b", &p);
	desc_init(&d[1], "c", "", &p);
	msg = response("dom", dp, 2, &len);
	for (i = 0; i < len; i++) {
		uint8_t *cut = malloc(i + 1);

		CHECK(cut != NULL);
		memcpy(cut, msg, i);
		/* A prefix may still parse (protobuf has no end marker);
		 * what it gives is a config or an error. */
		cfg = load(cut, i, err, sizeof(err));
		sluice_envoy_config_free(cfg);
		free(cut);
	}
	cfg = load(msg, len, err, sizeof(err));
	CHECK(cfg != NULL);
	sluice_envoy_config_free(cfg);
	free(msg);
	for (i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	CHECK(load(junk, sizeof(junk), err, sizeof(err)) == NULL);
}

static void test_requests(void)
{
	sluice_envoy_xds_t x = {.node_id = "node-1", .cluster = "rl"};
	Envoy__Service__Discovery__V3__DiscoveryRequest *r;
	uint8_t *m;
	size_t len;

	m = sluice_xds_request(&x, "v3", "n7", NULL, &len);
	CHECK(m != NULL && len > 5 && m[0] == 0);
	CHECK_EQ_U64((size_t)m[1] << 24 | m[2] << 16 | m[3] << 8 | m[4],
		     len - 5);
	r = envoy__service__discovery__v3__discovery_request__unpack(
		NULL, len - 5, m + 5);
	CHECK(r != NULL);
	CHECK(strcmp(r->version_info, "v3") == 0);
	CHECK(strcmp(r->response_nonce, "n7") == 0);
	CHECK(strcmp(r->type_url, SLUICE_XDS_TYPE_URL) == 0);
	CHECK(strcmp(r->node->id, "node-1") == 0);
	CHECK(strcmp(r->node->cluster, "rl") == 0);
	CHECK(r->error_detail == NULL);
	envoy__service__discovery__v3__discovery_request__free_unpacked(r,
									NULL);
	free(m);
	m = sluice_xds_request(&x, "v3", "n8", "xds:a:3: bad", &len);
	r = envoy__service__discovery__v3__discovery_request__unpack(
		NULL, len - 5, m + 5);
	CHECK(r != NULL && r->error_detail != NULL);
	CHECK_EQ_U64(r->error_detail->code, 3);
	CHECK(strcmp(r->error_detail->message, "xds:a:3: bad") == 0);
	envoy__service__discovery__v3__discovery_request__free_unpacked(r,
									NULL);
	free(m);
}

static void test_call_headers_end_with_the_configured_ones(void)
{
	char *hn[] = {"authorization", "x-tenant"};
	char *hv[] = {"Bearer s3cret", "7"};
	sluice_envoy_xds_t x = {.server = "cp:18001", .node_id = "n"};
	const char *names[SLUICE_XDS_CALL_HEADERS];
	const char *values[SLUICE_XDS_CALL_HEADERS];
	size_t n;

	n = sluice_xds_call_headers(&x, names, values);
	CHECK_EQ_U64(n, 7);
	CHECK(strcmp(names[0], ":method") == 0 &&
	      strcmp(values[0], "POST") == 0);
	CHECK(strcmp(names[1], ":scheme") == 0 &&
	      strcmp(values[1], "http") == 0);
	CHECK(strcmp(names[2], ":path") == 0 &&
	      strcmp(values[2], "/envoy.service.discovery.v3."
				"AggregatedDiscoveryService/"
				"StreamAggregatedResources") == 0);
	CHECK(strcmp(names[3], ":authority") == 0 &&
	      strcmp(values[3], "cp:18001") == 0);
	CHECK(strcmp(names[4], "content-type") == 0 &&
	      strcmp(values[4], "application/grpc") == 0);
	CHECK(strcmp(names[5], "te") == 0 &&
	      strcmp(values[5], "trailers") == 0);
	CHECK(strcmp(names[6], "user-agent") == 0);
	x.tls = 1;
	x.header_names = hn;
	x.header_values = hv;
	x.nheaders = 2;
	n = sluice_xds_call_headers(&x, names, values);
	CHECK_EQ_U64(n, 9);
	CHECK(strcmp(values[1], "https") == 0);
	CHECK(strcmp(names[7], "authorization") == 0 &&
	      strcmp(values[7], "Bearer s3cret") == 0);
	CHECK(strcmp(names[8], "x-tenant") == 0 && strcmp(values[8], "7") == 0);
}

int main(void)
{
	RUN(test_strings_arrive_exactly);
	RUN(test_units_as_envoyproxy_reads_them);
	RUN(test_nesting_is_bounded);
	RUN(test_prefixes_and_garbage_are_errors);
	RUN(test_requests);
	RUN(test_call_headers_end_with_the_configured_ones);
	TESTS_DONE();
}
