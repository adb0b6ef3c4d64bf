/*
 * test_envoy_config.c -- envoyproxy/ratelimit's YAML directory: the files
 * of its README and test/config load and match as there, nested folders
 * included; each of its bad files is refused naming FILE:LINE.  sluice's
 * extensions, bucket keys and metric paths: test_envoy_config_keys.c.
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

/* ------------------------------------------------------------ the files */

static const char basic[] =
	"# envoyproxy/ratelimit test/config/basic_config.yaml\n"
	"domain: test-domain\n"
	"descriptors:\n"
	"  - key: key1\n"
	"    value: value1\n"
	"    descriptors:\n"
	"      - key: subkey1\n"
	"        rate_limit: {unit: second, requests_per_unit: 5}\n"
	"      - key: subkey1\n"
	"        value: subvalue1\n"
	"        rate_limit: {unit: second, requests_per_unit: 10}\n"
	"  - key: key2\n"
	"    rate_limit: {unit: minute, requests_per_unit: 20}\n"
	"  - key: key2\n"
	"    value: value2\n"
	"    rate_limit: {unit: minute, requests_per_unit: 30}\n"
	"  - key: key2\n"
	"    value: value3\n"
	"  - key: key3\n"
	"    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	"  - key: key4\n"
	"    rate_limit: {name: key4_rate_limit, unit: day, "
	"requests_per_unit: 1}\n"
	"  - key: key5\n"
	"    value: value5\n"
	"    rate_limit: {unit: day, requests_per_unit: 15}\n"
	"    descriptors:\n"
	"      - key: subkey5\n"
	"        value: subvalue5\n"
	"        rate_limit: {unit: day, requests_per_unit: 25}\n"
	"  - key: key6\n"
	"    rate_limit: {unlimited: true}\n"
	"  - key: key7\n"
	"    detailed_metric: true\n"
	"    rate_limit: {unit: minute, requests_per_unit: 70}\n";

static void test_basic_config_matches_as_upstream(void)
{
	sluice_envoy_config_t *cfg;
	sluice_envoy_match_t m;
	const sluice_envoy_node_t *n;

	new_dir();
	put("basic.yaml", basic);
	cfg = load();
	CHECK(cfg != NULL);
	CHECK(cfg->ndomains == 1);
	/* Unknown domain and unknown key: no limit. */
	CHECK(lookup(cfg, "other", "key2=x", &m) == NULL);
	CHECK(lookup(cfg, "test-domain", "nope=x", &m) == NULL);
	/* key1=value1 has no limit of its own; one level deeper does. */
	CHECK(lookup(cfg, "test-domain", "key1=value1", &m) == NULL);
	CHECK_EQ_U64(
		rpu(lookup(cfg, "test-domain", "key1=value1;subkey1=x", &m)),
		5);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain",
				"key1=value1;subkey1=subvalue1", &m)),
		     10);
	/* Most specific first: key/value before the key alone. */
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "key2=value2", &m)), 30);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "key2=other", &m)), 20);
	/* key2=value3 whitelists: matched, no limit. */
	CHECK(lookup(cfg, "test-domain", "key2=value3", &m) == NULL);
	/* Depth must match: key5 alone 15, with its sub 25, deeper none. */
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "key5=value5", &m)), 15);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain",
				"key5=value5;subkey5=subvalue5", &m)),
		     25);
	CHECK(lookup(cfg, "test-domain", "key5=value5;subkey5=subvalue5;x=y",
		     &m) == NULL);
	CHECK(lookup(cfg, "test-domain", "key2=value2;x=y", &m) == NULL);
	n = lookup(cfg, "test-domain", "key6=x", &m);
	CHECK(n && n->limit->unlimited);
	n = lookup(cfg, "test-domain", "key4=x", &m);
	CHECK(n && strcmp(n->limit->name, "key4_rate_limit") == 0);
	CHECK(n->limit->units[0].unit == SLUICE_RLS_UNIT_DAY);
	/* requests_per_unit N per unit U: capacity N, refill N per U. */
	CHECK_EQ_U64(n->limit->set.limits[0].capacity, 1);
	CHECK_EQ_U64(n->limit->set.limits[0].tau /
			     n->limit->set.limits[0].rate.per,
		     UINT64_C(86400000000));
	sluice_envoy_config_free(cfg);
	rm_dir();
}

static void test_wildcards_as_upstream(void)
{
	sluice_envoy_config_t *cfg;
	sluice_envoy_match_t m;

	new_dir();
	put("wildcard.yaml",
	    "domain: test-domain\n"
	    "descriptors:\n"
	    "  - {key: wild, value: foo*, rate_limit: {unit: minute, "
	    "requests_per_unit: 20}}\n"
	    "  - {key: noWild, value: foo, rate_limit: {unit: minute, "
	    "requests_per_unit: 21}}\n"
	    "  - {key: midWild, value: bar*b, rate_limit: {unit: minute, "
	    "requests_per_unit: 22}}\n"
	    "  - {key: multiWild, value: foo*bar*baz, rate_limit: {unit: "
	    "minute, requests_per_unit: 10}}\n"
	    "  - key: nestedWild\n"
	    "    value: val1\n"
	    "    descriptors:\n"
	    "      - {key: wild, value: goo*, rate_limit: {unit: minute, "
	    "requests_per_unit: 23}}\n"
	    "  - {key: path, value: /api/*/action, rate_limit: {unit: "
	    "minute, requests_per_unit: 24}}\n");
	CHECK((cfg = load()) != NULL);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "wild=foo1", &m)), 20);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "wild=foo", &m)), 20);
	CHECK(lookup(cfg, "test-domain", "wild=fo", &m) == NULL);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "noWild=foo", &m)), 21);
	CHECK(lookup(cfg, "test-domain", "noWild=foo1", &m) == NULL);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "midWild=barab", &m)), 22);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "midWild=barb", &m)), 22);
	CHECK(lookup(cfg, "test-domain", "midWild=bab", &m) == NULL);
	CHECK(lookup(cfg, "test-domain", "midWild=barba", &m) == NULL);
	CHECK_EQ_U64(
		rpu(lookup(cfg, "test-domain", "multiWild=foo1bar2baz", &m)),
		10);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "multiWild=foobarbaz", &m)),
		     10);
	CHECK(lookup(cfg, "test-domain", "multiWild=foobazbar", &m) == NULL);
	CHECK_EQ_U64(rpu(lookup(cfg, "test-domain", "nestedWild=val1;wild=goo2",
				&m)),
		     23);
	CHECK(lookup(cfg, "test-domain", "nestedWild=val1;wild=foo2", &m) ==
	      NULL);
	/* README Example 9 */
	CHECK_EQ_U64(
		rpu(lookup(cfg, "test-domain", "path=/api/123/action", &m)),
		24);
	CHECK(lookup(cfg, "test-domain", "path=/api/123/other", &m) == NULL);
	sluice_envoy_config_free(cfg);
	rm_dir();
}

static void test_wildcard_parts_never_overlap(void)
{
	char *ab[] = {"ab", "ba"};

	/* "aba" holds "ab" and "ba" only by sharing the middle b. */
	CHECK(!sluice_envoy_wildcard_match(ab, 2, "aba"));
	CHECK(sluice_envoy_wildcard_match(ab, 2, "abba"));
	CHECK(sluice_envoy_wildcard_match(ab, 2, "abxba"));
}

/* --------------------------------------------------------- bad files */

static void test_bad_files_name_file_and_line(void)
{
	refused("domain: test-domain\ndescriptors:\n  - key: key1\n"
		"    value: value1\n    rate_limit:\n      unit: foo\n"
		"      requests_per_unit: 5\n",
		6, "invalid rate limit unit 'foo'");
	refused("domain: test-domain\ndescriptors:\n  - key: key1\n"
		"    value: value1\n\n  - key: key1\n    value: value1\n",
		6,
		"duplicate descriptor composite key "
		"'test-domain.key1_value1'");
	refused("domain: test-domain\ndescriptors:\n  - key: key1\n"
		"    value: value1\n    ratelimit:\n      unit: day\n"
		"      requests_per_unit: 5\n",
		5, "ratelimit");
	refused("domain: test-domain\ndescriptors:\n  - key: key1\n"
		"    value: value1\n    rate_limit:\n      unit: day\n"
		"      requestsperunit: 5\n",
		7, "requestsperunit");
	refused("domain: test-domain\ndescriptors:\n  - a\n  - b\n", 3,
		"descriptor");
	refused("0.25: test-domain\ndescriptors:\n  - key: key1\n", 1, "0.25");
	refused("domain: test-domain\ndescriptors:\n  - key: key1\n"
		"    value: value1\n    descriptors:\n      - key: subkey1\n"
		"        rate_limit:\n          name: self\n"
		"          replaces:\n            - name: self\n"
		"          unit: second\n          requests_per_unit: 5\n",
		10, "replaces should not contain name of same descriptor");
	refused("domain: test-domain\ndescriptors:\n  - key: key1\n"
		"    value: value1\n    descriptors:\n      - key: subkey1\n"
		"        rate_limit:\n          name: self\n"
		"          replaces:\n            - name:\n"
		"          unit: second\n          requests_per_unit: 5\n",
		10, "should not have an empty replaces entry");
	refused("domain: test-domain\ndescriptors:\n  - key: foo\n"
		"    rate_limit:\n      unlimited: true\n      unit: day\n"
		"      requests_per_unit: 25\n",
		6, "should not specify rate limit unit when unlimited");
	refused("domain: test-domain\ndescriptors:\n  - value: value1\n", 3,
		"descriptor has empty key");
	refused("descriptors:\n", 1, "config file cannot have empty domain");
	refused("domain: d\ndescriptors:\n  - key: k\n    value: v\n"
		"    share_threshold: true\n",
		3, "share_threshold can only be used with wildcard values");
	refused("domain: d\ndescriptors:\n  - key: k\n"
		"    rate_limit: {unit: second, requests_per_unit: 5}\n"
		"    quota_mode: maybe\n",
		5, "quota_mode is \"maybe\"; expected true or false");
	refused("domain: d\ndescriptors:\n  - key: k\n"
		"    rate_limit: {unit: fortnight, requests_per_unit: 5}\n",
		4, "invalid rate limit unit 'fortnight'");
	refused("domain: d\n  descriptors: [\n", 2, "YAML syntax error");
}

/* An alias bomb in envoyproxy/ratelimit's own shape: each level a
 * descriptor whose children are three aliases of the level before (3^k
 * descriptors to walk from a line each).  It is refused while the file
 * is read, at the alias past which aliases stand for more than 100,000
 * nodes, before any descriptor is built; a shared rate_limit still
 * loads. */
static void test_alias_bomb_is_refused_at_the_alias(void)
{
	char text[4096], want[300];
	uint64_t size = 5, aliased = 0; /* the map, key, k0 and 2 more */
	int k, j, line = 0;
	size_t n;

	n = (size_t)snprintf(text, sizeof(text),
			     "domain: d\ndescriptors:\n"
			     "  - &l0 {key: k0, value: v}\n");
	/* Up to the level that passes the bound: no further, so that a
	 * loader without the bound still ends (and loads it). */
	for (k = 1; k < 16 && !line; k++) {
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      "  - &l%d {key: k%d, descriptors: "
				      "[*l%d, *l%d, *l%d]}\n",
				      k, k, k - 1, k - 1, k - 1);
		for (j = 0; j < 3 && !line; j++) {
			aliased += size;
			if (aliased > 100000)
				line = 3 + k;
		}
		size = 6 + 3 * size; /* the map, 2 keys, a value, the list */
	}
	CHECK(n < sizeof(text) && line > 3);
	new_dir();
	put("bomb.yaml", text);
	CHECK(load() == NULL);
	snprintf(want, sizeof(want),
		 "%s/bomb.yaml:%d: aliases stand for more "
		 "than 100000 nodes",
		 dir, line);
	if (strncmp(err, want, strlen(want)) != 0)
		fprintf(stderr, "got: %s\nwant: %s\n", err, want);
	CHECK(strncmp(err, want, strlen(want)) == 0);
	rm_dir();
	refused("domain: d\ndescriptors: &d\n  - key: k\n    descriptors: "
		"*d\n",
		4, "the alias *d is inside the node it names");
	{
		sluice_envoy_config_t *cfg;

		new_dir();
		put("shared.yaml",
		    "domain: d\ndescriptors:\n"
		    "  - key: a\n    rate_limit: &rl {unit: second, "
		    "requests_per_unit: 5}\n"
		    "  - key: b\n    rate_limit: *rl\n");
		cfg = load();
		if (!cfg)
			fprintf(stderr, "%s\n", err);
		CHECK(cfg != NULL);
		CHECK(cfg->ndomains == 1 && cfg->domains[0].nchildren == 2);
		sluice_envoy_config_free(cfg);
		rm_dir();
	}
}

static void test_duplicate_domain_names_both_files(void)
{
	new_dir();
	put("a.yaml", "domain: test-domain\ndescriptors:\n");
	put("b.yaml", "# second\ndomain: test-domain\ndescriptors:\n");
	CHECK(load() == NULL);
	CHECK(strstr(err, "/b.yaml:2: duplicate domain 'test-domain'"));
	CHECK(strstr(err, "/a.yaml:1"));
	rm_dir();
}

/* merge_domains (MERGE_DOMAIN_CONFIG): one domain across files, a
 * key/value given twice still an error naming both places. */
static void test_merge_domains(void)
{
	sluice_envoy_settings_t st;
	sluice_envoy_config_t *cfg;
	sluice_envoy_match_t m;

	sluice_envoy_settings_init(&st);
	st.merge_domains = 1;
	new_dir();
	put("a.yaml", "domain: d\ndescriptors:\n  - key: k1\n"
		      "    rate_limit: {unit: second, requests_per_unit: 1}\n");
	put("b.yaml", "domain: d\ndescriptors:\n  - key: k2\n"
		      "    rate_limit: {unit: second, requests_per_unit: 2}\n");
	cfg = sluice_envoy_load_dir(dir, &st, err, sizeof(err), report,
				    sizeof(report), 50, &nerr);
	CHECK(cfg != NULL);
	CHECK(cfg->ndomains == 1);
	CHECK_EQ_U64(rpu(lookup(cfg, "d", "k1=x", &m)), 1);
	CHECK_EQ_U64(rpu(lookup(cfg, "d", "k2=x", &m)), 2);
	sluice_envoy_config_free(cfg);
	put("c.yaml", "domain: d\ndescriptors:\n\n  - key: k1\n");
	CHECK(sluice_envoy_load_dir(dir, &st, err, sizeof(err), report,
				    sizeof(report), 50, &nerr) == NULL);
	CHECK(strstr(err, "/c.yaml:4: duplicate descriptor composite key "
			  "'d.k1' (also in "));
	CHECK(strstr(err, "/a.yaml:3"));
	rm_dir();
}

static void test_every_error_is_reported(void)
{
	new_dir();
	put("a.yaml", "domain: a\ndescriptors:\n  - key: k\n"
		      "    rate_limit: {unit: foo, requests_per_unit: 1}\n"
		      "  - key: j\n    colour: red\n");
	put("b.yaml", "domain: b\ndescriptors:\n  - value: x\n");
	CHECK(load() == NULL);
	CHECK(nerr == 3);
	CHECK(strstr(report, "/a.yaml:4: invalid rate limit unit 'foo'"));
	CHECK(strstr(report, "/a.yaml:6: "));
	CHECK(strstr(report, "/b.yaml:3: descriptor has empty key"));
	rm_dir();
}

static void test_dot_files_and_other_names_are_skipped(void)
{
	sluice_envoy_config_t *cfg;
	char path[256], target[256];

	new_dir();
	put("a.yaml", "domain: a\n");
	put("notes.txt", "not yaml: [");
	put(".hidden.yaml", "not yaml: [");
	/* A ConfigMap volume: files are symlinks through ..data. */
	snprintf(path, sizeof(path), "%s/..2026_data", dir);
	CHECK(mkdir(path, 0700) == 0);
	put("..2026_data/b.yaml", "domain: b\n");
	snprintf(path, sizeof(path), "%s/..data", dir);
	CHECK(symlink("..2026_data", path) == 0);
	snprintf(path, sizeof(path), "%s/b.yaml", dir);
	snprintf(target, sizeof(target), "..data/b.yaml");
	CHECK(symlink(target, path) == 0);
	cfg = load();
	CHECK(cfg != NULL);
	CHECK(cfg->ndomains == 2);
	CHECK(sluice_envoy_domain(cfg, "a") && sluice_envoy_domain(cfg, "b"));
	sluice_envoy_config_free(cfg);
	rm_dir();
}

static void test_missing_directory_is_an_error(void)
{
	new_dir();
	rm_dir();
	CHECK(load() == NULL);
	CHECK(strstr(err, "cannot open the directory"));
}

/* Nested folders are read, as envoyproxy/ratelimit reads them; a symlink
 * back up is a loop, skipped (named), never followed forever; a ConfigMap's
 * dot entries (the same files again) are skipped; other names are named
 * in the loader's skipped lines; the watcher's stamp sees a nested file. */
static void test_nested_folders_loops_and_skips(void)
{
	sluice_envoy_config_t *cfg;
	char path[512], link[512];
	uint64_t before;

	new_dir();
	snprintf(path, sizeof(path), "%s/a", dir);
	CHECK(mkdir(path, 0755) == 0);
	snprintf(path, sizeof(path), "%s/a/b", dir);
	CHECK(mkdir(path, 0755) == 0);
	snprintf(path, sizeof(path), "%s/..data", dir);
	CHECK(mkdir(path, 0755) == 0);
	put("a/b/deep.yaml",
	    "domain: deep\ndescriptors:\n  - key: k\n"
	    "    rate_limit: {unit: minute, requests_per_unit: 1}\n");
	put("..data/deep.yaml", "domain: deep\n"); /* would be a duplicate */
	put("a/notes.md", "# not a config\n");
	snprintf(link, sizeof(link), "%s/a/b/up", dir);
	CHECK(symlink(dir, link) == 0);
	cfg = load();
	if (!cfg)
		fprintf(stderr, "%s\n", err);
	CHECK(cfg != NULL);
	CHECK(cfg->nfiles == 1);
	CHECK(sluice_envoy_domain(cfg, "deep") != NULL);
	sluice_buf_append(&cfg->skipped, "", 1);
	CHECK(strstr(cfg->skipped.data, "/a/notes.md: not a .yaml"));
	CHECK(strstr(cfg->skipped.data,
		     "/a/b/up: a directory that leads back"));
	CHECK(strstr(cfg->skipped.data, "/..data: a dot file"));
	sluice_envoy_config_free(cfg);
	before = sluice_envoy_dir_stamp(dir);
	put("a/b/deep.yaml",
	    "domain: deep\ndescriptors:\n  - key: k\n"
	    "    rate_limit: {unit: minute, requests_per_unit: 2}\n");
	put("a/b/more.yaml", "domain: more\n"); /* a new file, two deep */
	CHECK(sluice_envoy_dir_stamp(dir) != before);
	rm_dir();
}

int main(void)
{
	RUN(test_basic_config_matches_as_upstream);
	RUN(test_nested_folders_loops_and_skips);
	RUN(test_wildcards_as_upstream);
	RUN(test_wildcard_parts_never_overlap);
	RUN(test_bad_files_name_file_and_line);
	RUN(test_alias_bomb_is_refused_at_the_alias);
	RUN(test_duplicate_domain_names_both_files);
	RUN(test_merge_domains);
	RUN(test_every_error_is_reported);
	RUN(test_dot_files_and_other_names_are_skipped);
	RUN(test_missing_directory_is_an_error);
	TESTS_DONE();
}
