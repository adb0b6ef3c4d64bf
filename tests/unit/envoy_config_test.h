/*
 * envoy_config_test.h -- what the tests of envoyproxy/ratelimit's YAML
 * directory share: a directory of files, loaded, a descriptor's node
 * looked up in it, and a file refused naming its line.
 */
#ifndef SLUICE_TESTS_ENVOY_CONFIG_TEST_H
#define SLUICE_TESTS_ENVOY_CONFIG_TEST_H

#include "check.h"
#include "policy/envoy/config.h"
#include "policy/envoy/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static inline void new_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/sluice-envoy-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
}

static inline void put(const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	CHECK(f != NULL);
	fputs(text, f);
	fclose(f);
}

static inline void rm_dir(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
}

static char err[1024], report[8192];
static unsigned nerr;

static inline sluice_envoy_config_t *load(void)
{
	sluice_envoy_settings_t s;

	sluice_envoy_settings_init(&s);
	return sluice_envoy_load_dir(dir, &s, err, sizeof(err), report,
				     sizeof(report), 50, &nerr);
}

/* Loads one file; its limit for entries k1=v1[,k2=v2...] ("k=v;k=v"). */
static inline const sluice_envoy_node_t *
lookup(const sluice_envoy_config_t *cfg, const char *domain, const char *spec,
       sluice_envoy_match_t *m)
{
	static char buf[512];
	sluice_rls_entry_t e[8];
	size_t n = 0;
	char *p, *save = NULL;

	snprintf(buf, sizeof(buf), "%s", spec);
	for (p = strtok_r(buf, ";", &save); p && n < 8;
	     p = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(p, '=');

		CHECK(eq != NULL);
		*eq = '\0';
		e[n].key = p;
		e[n++].value = eq + 1;
	}
	sluice_envoy_match(sluice_envoy_domain(cfg, domain), e, n, m);
	return m->node;
}

static inline uint32_t rpu(const sluice_envoy_node_t *n)
{
	CHECK(n && n->limit);
	return n->limit->units[0].requests_per_unit;
}

/* Loads `text` as the only file and checks the first error names it at
 * `line` and says `what`. */
static inline void refused(const char *text, int line, const char *what)
{
	char want[300];

	new_dir();
	put("bad.yaml", text);
	CHECK(load() == NULL);
	CHECK(nerr >= 1);
	snprintf(want, sizeof(want), "%s/bad.yaml:%d: ", dir, line);
	if (strncmp(err, want, strlen(want)) != 0 || !strstr(err, what)) {
		fprintf(stderr, "got: %s\nwant: %s...%s\n", err, want, what);
		CHECK(0);
	}
	rm_dir();
}

#endif /* SLUICE_TESTS_ENVOY_CONFIG_TEST_H */
