/*
 * envoy_rls_test.h -- what the RLS engine's tests share: a service on
 * the memory store whose envoy section reads one file, and requests
 * written as "k=v,k=v|k=v" decided through sluice_rls_decide().
 */
#ifndef SLUICE_TESTS_ENVOY_RLS_TEST_H
#define SLUICE_TESTS_ENVOY_RLS_TEST_H

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

static inline void put(const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	CHECK((f = fopen(path, "w")) != NULL);
	fputs(text, f);
	fclose(f);
}

/* A service whose envoy section reads `files` (name, text, ...). */
static inline void start(const char *extra, const char *name, const char *text)
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

static inline void stop(void)
{
	char cmd[128];

	sluice_live_unref(svc.live);
	sluice_memstore_free(store);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0);
}

static sluice_rls_response_t *got;

static inline void on_answer(void *arg, sluice_rls_response_t *r)
{
	got = r;
}

/* Descriptors as "k=v,k=v|k=v" (| between descriptors). */
static inline sluice_rls_response_t *decide_ex(const char *domain,
					       const char *spec, uint32_t hits,
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

static inline sluice_rls_response_t *decide(const char *domain,
					    const char *spec)
{
	return decide_ex(domain, spec, 0, NULL);
}

#define OK   SLUICE_RLS_CODE_OK
#define OVER SLUICE_RLS_CODE_OVER_LIMIT

/* envoyproxy/ratelimit's README, example 2 (both files use it). */
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

#endif /* SLUICE_TESTS_ENVOY_RLS_TEST_H */
