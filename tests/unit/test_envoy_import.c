/*
 * test_envoy_import.c -- envoy.import_counters' pieces that need no Redis:
 * envoyproxy/ratelimit's counter key (its GenerateCacheKey: prefix,
 * domain, each entry's key and value, the window's start for each unit,
 * a share_threshold pattern), and the config's refusal of a store that
 * holds no envoyproxy/ratelimit counters, naming file:line.  Redis itself:
 * tests/integration/test_envoy_import.py.
 */
#include "check.h"
#include "policy/envoy/config.h"
#include "policy/envoy/import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2023-11-14T22:15:23Z: inside every window below, none at its start. */
#define NOW 1700000123

static char *key_of(const char *prefix, const char *domain,
		    const sluice_rls_entry_t *e, size_t n,
		    const char *const *shared, sluice_rls_unit_t unit)
{
	static char out[512];
	sluice_buf_t b = {0};

	CHECK(sluice_envoy_counter_key(&b, prefix, domain, e, n, shared, unit,
				       NOW) == 0);
	snprintf(out, sizeof(out), "%.*s", (int)b.len, b.data);
	sluice_buf_free(&b);
	return out;
}

/* envoyproxy/ratelimit's README example 2 descriptor, under each unit:
 * the window start is (now / divider) * divider, computed here by hand
 * from its UnitToDivider table. */
static void test_key_per_unit(void)
{
	static const struct {
		sluice_rls_unit_t unit;
		const char *start;
	} t[] = {
		{SLUICE_RLS_UNIT_SECOND, "1700000123"},
		{SLUICE_RLS_UNIT_MINUTE, "1700000100"},
		{SLUICE_RLS_UNIT_HOUR, "1699999200"},
		{SLUICE_RLS_UNIT_DAY, "1699920000"},
		{SLUICE_RLS_UNIT_WEEK, "1699488000"},
		{SLUICE_RLS_UNIT_MONTH, "1697760000"},
		{SLUICE_RLS_UNIT_YEAR, "1671408000"},
	};
	const sluice_rls_entry_t e[] = {{"message_type", "marketing"},
					{"to_number", "2061234567"}};
	char want[256];
	size_t i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(want, sizeof(want),
			 "messaging_message_type_marketing_to_number_"
			 "2061234567_%s",
			 t[i].start);
		CHECK(strcmp(key_of(NULL, "messaging", e, 2, NULL, t[i].unit),
			     want) == 0);
	}
}

/* CACHE_KEY_PREFIX goes first, as is; an empty value is written empty
 * (key, '_', nothing, '_'); a value keeps its own underscores. */
static void test_key_prefix_and_values(void)
{
	const sluice_rls_entry_t e[] = {
		{"remote_address", "10.0.0.1"}, {"path", ""}, {"user", "a_b"}};

	CHECK(strcmp(key_of("ratelimit:", "edge", e, 1, NULL,
			    SLUICE_RLS_UNIT_SECOND),
		     "ratelimit:edge_remote_address_10.0.0.1_1700000123") == 0);
	CHECK(strcmp(key_of("", "edge", e, 3, NULL, SLUICE_RLS_UNIT_MINUTE),
		     "edge_remote_address_10.0.0.1_path__user_a_b_"
		     "1700000100") == 0);
	/* No entry: the domain and the window alone. */
	CHECK(strcmp(key_of(NULL, "edge", e, 0, NULL, SLUICE_RLS_UNIT_HOUR),
		     "edge_1699999200") == 0);
}

/* A unit with no window (UNKNOWN) has no key. */
static void test_key_unknown_unit(void)
{
	const sluice_rls_entry_t e[] = {{"k", "v"}};
	sluice_buf_t b = {0};

	CHECK(sluice_envoy_counter_key(&b, "", "d", e, 1, NULL,
				       SLUICE_RLS_UNIT_UNKNOWN, NOW) < 0);
	sluice_buf_free(&b);
}

/* share_threshold: envoyproxy/ratelimit names the counter with the
 * wildcard pattern in place of the value (its test wants
 * "domain_files_files/" "*_1234"); the config's match gives the
 * pattern. */
static void test_key_share_threshold(void)
{
	static const char text[] = "domain: example11\n"
				   "descriptors:\n"
				   "  - key: files\n"
				   "    value: files/*\n"
				   "    share_threshold: true\n"
				   "    rate_limit: {unit: hour, "
				   "requests_per_unit: 10}\n"
				   "  - key: other\n"
				   "    value: other/*\n"
				   "    rate_limit: {unit: hour, "
				   "requests_per_unit: 10}\n";
	sluice_envoy_settings_t s;
	sluice_envoy_config_t *cfg;
	sluice_envoy_match_t m;
	const sluice_rls_entry_t a[] = {{"files", "files/a.pdf"}};
	const sluice_rls_entry_t o[] = {{"other", "other/a.pdf"}};
	char err[256];

	sluice_envoy_settings_init(&s);
	cfg = sluice_envoy_load_text("e11.yaml", text, strlen(text), &s, err,
				     sizeof(err));
	CHECK(cfg != NULL);
	sluice_envoy_match(sluice_envoy_domain(cfg, "example11"), a, 1, &m);
	CHECK(m.node != NULL);
	CHECK(strcmp(key_of("", "example11", a, 1, m.shared,
			    SLUICE_RLS_UNIT_HOUR),
		     "example11_files_files/*_1699999200") == 0);
	/* Without share_threshold each value is its own counter. */
	sluice_envoy_match(sluice_envoy_domain(cfg, "example11"), o, 1, &m);
	CHECK(m.node != NULL);
	CHECK(strcmp(key_of("", "example11", o, 1, m.shared,
			    SLUICE_RLS_UNIT_HOUR),
		     "example11_other_other/a.pdf_1699999200") == 0);
	sluice_envoy_config_free(cfg);
}

/* ------------------------------------------------------------- config */

static char dir[64];

static sluice_config_t *parse(const char *store, const char *envoy_extra,
			      char *err, size_t errlen)
{
	char text[1024];

	snprintf(text, sizeof(text),
		 "store: %s\n"
		 "envoy:\n"
		 "  config_dir: %s\n"
		 "%s",
		 store, dir, envoy_extra);
	return sluice_config_parse("sluice.yaml", text, strlen(text), err,
				   errlen);
}

static void test_config_import_needs_redis(void)
{
	sluice_config_t *c;
	char err[1024], path[128];
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/sluice-import-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/api.yaml", dir);
	CHECK((f = fopen(path, "w")) != NULL);
	fputs("domain: api\ndescriptors:\n  - key: user\n"
	      "    rate_limit: {unit: hour, requests_per_unit: 10}\n",
	      f);
	fclose(f);

	/* Redis on one server: loaded, the prefix kept. */
	c = parse("{redis: {url: \"redis://127.0.0.1:6379\"}}",
		  "  import_counters: true\n  cache_key_prefix: \"rl:\"\n", err,
		  sizeof(err));
	if (!c)
		fprintf(stderr, "%s\n", err);
	CHECK(c != NULL);
	CHECK(c->envoy->settings.import_counters == 1);
	CHECK(strcmp(c->envoy->settings.cache_key_prefix, "rl:") == 0);
	sluice_config_free(c);

	/* Off by default, with an empty prefix. */
	c = parse("memory", "", err, sizeof(err));
	CHECK(c != NULL);
	CHECK(c->envoy->settings.import_counters == 0);
	CHECK(strcmp(c->envoy->settings.cache_key_prefix, "") == 0);
	sluice_config_free(c);

	/* Memory, shared, cluster: refused at the import_counters line. */
	c = parse("memory", "  import_counters: true\n", err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strstr(err, "sluice.yaml:4:") != NULL);
	CHECK(strstr(err, "import_counters") && strstr(err, "memory"));
	c = parse("{shared: {path: /tmp/sluice-import-shm}}",
		  "  import_counters: true\n", err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strstr(err, "sluice.yaml:4:") != NULL);
	c = parse("{redis_cluster: {seeds: [\"127.0.0.1:7000\"]}}",
		  "  watch_ms: 0\n  import_counters: true\n", err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strstr(err, "sluice.yaml:5:") != NULL);
	CHECK(strstr(err, "Cluster") != NULL);
	/* Off on a memory store: nothing to refuse. */
	c = parse("memory", "  import_counters: false\n", err, sizeof(err));
	CHECK(c != NULL);
	sluice_config_free(c);
	/* Not a boolean; a prefix that is not a string. */
	c = parse("{redis: {url: \"redis://127.0.0.1:6379\"}}",
		  "  import_counters: maybe\n", err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strstr(err, "sluice.yaml:4:") != NULL);
	c = parse("{redis: {url: \"redis://127.0.0.1:6379\"}}",
		  "  cache_key_prefix: [a]\n", err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strstr(err, "sluice.yaml:4:") != NULL);

	remove(path);
	rmdir(dir);
}

int main(void)
{
	RUN(test_key_per_unit);
	RUN(test_key_prefix_and_values);
	RUN(test_key_unknown_unit);
	RUN(test_key_share_threshold);
	RUN(test_config_import_needs_redis);
	TESTS_DONE();
}
