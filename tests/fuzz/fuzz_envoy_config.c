/*
 * fuzz_envoy_config.c -- libFuzzer harness for envoyproxy/ratelimit YAML
 * files (src/policy/envoy/config.c) and the matching over what loads.
 *
 * Any bytes must give either a config or a "FILE:LINE: ..." message,
 * never a crash, a leak or undefined behaviour.  A file that loads is
 * matched against descriptors made from its own keys and some values, and
 * their bucket keys and metrics series are built.
 *
 * The node budget: a file's aliases may stand for at most
 * SLUICE_YAML_MAX_ALIAS_NODES nodes, so what loads holds no more
 * descriptors than the file's own nodes (fewer than its bytes) plus that;
 * an alias bomb that slipped past the count would load more, and abort.
 */
#include "policy/config/yaml.h"
#include "policy/envoy/config.h"
#include "policy/envoy/metrics.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Descriptors down the first path of the tree, with the config's own
 * values and others at each level. */
static void walk(const sluice_envoy_domain_t *dom)
{
	static const char *const values[] = {"", "a", "value1", "x*y", NULL};
	sluice_rls_entry_t e[SLUICE_ENVOY_MAX_ENTRIES];
	const sluice_envoy_node_t *level = dom->children, *node;
	size_t nlevel = dom->nchildren, n = 0, v;
	sluice_envoy_match_t m;
	char key[SLUICE_KEY_MAX];

	while (nlevel && n < SLUICE_ENVOY_MAX_ENTRIES) {
		node = &level[0];
		e[n].key = node->key;
		n++;
		for (v = 0; values[v]; v++) {
			e[n - 1].value = values[v];
			sluice_envoy_match(dom, e, n, &m);
			sluice_envoy_key(dom->name, e, n, &m, key);
			(void)sluice_envoy_match_series(dom->name, e, n, &m);
		}
		e[n - 1].value = node->value ? node->value : "v";
		sluice_envoy_match(dom, e, n, &m);
		sluice_envoy_key(dom->name, e, n, &m, key);
		(void)sluice_envoy_match_series(dom->name, e, n, &m);
		level = node->children;
		nlevel = node->nchildren;
	}
}

/* Descriptor nodes under n nodes (each counted once per reference). */
static size_t count_nodes(const sluice_envoy_node_t *n, size_t len)
{
	size_t i, total = len;

	for (i = 0; i < len; i++)
		total += count_nodes(n[i].children, n[i].nchildren);
	return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t nodes = 0;
	sluice_envoy_settings_t s;
	sluice_envoy_config_t *cfg;
	char err[1024];
	size_t i;

	sluice_envoy_settings_init(&s);
	cfg = sluice_envoy_load_text("fuzz.yaml", (const char *)data, size, &s,
				     err, sizeof(err));
	if (!cfg) {
		if (strncmp(err, "fuzz.yaml:", 10) != 0)
			abort(); /* every error names the file */
		return 0;
	}
	for (i = 0; i < cfg->ndomains; i++) {
		nodes += count_nodes(cfg->domains[i].children,
				     cfg->domains[i].nchildren);
		walk(&cfg->domains[i]);
	}
	if (nodes > size + SLUICE_YAML_MAX_ALIAS_NODES)
		abort(); /* the walk was not bounded */
	sluice_envoy_config_free(cfg);
	return 0;
}
