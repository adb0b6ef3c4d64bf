/*
 * config.c -- the built-in default configuration and freeing a config.
 *
 * The YAML reader lives in config_yaml.c; this file owns the shape of a
 * config in memory: its defaults and its lifetime.
 */
#include "serve/config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- defaults */

void sluice_config_init_defaults(sluice_config_t *cfg);

/* Fills the fields every config starts with (before the file overrides
 * them).  Allocates nothing but listen and the trusted proxy list. */
void sluice_config_init_defaults(sluice_config_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->threads = 1;
	cfg->store.kind = SLUICE_STORE_MEMORY;
	cfg->store.max_keys = 1000000;
	cfg->store.timeout_ms = 50;
	cfg->store.connections = 1;
	cfg->ipv6_prefix = 64;
	cfg->max_header_bytes = 8 * 1024;
	cfg->max_body_bytes = 16 * 1024;
	cfg->idle_timeout_ms = 30000;
}

static int default_trusted(sluice_config_t *cfg)
{
	cfg->trusted_proxies = calloc(2, sizeof(*cfg->trusted_proxies));
	if (!cfg->trusted_proxies)
		return -1;
	cfg->trusted_proxies[0].family = AF_INET;
	inet_pton(AF_INET, "127.0.0.1", cfg->trusted_proxies[0].addr);
	cfg->trusted_proxies[0].prefix = 32;
	cfg->trusted_proxies[1].family = AF_INET6;
	inet_pton(AF_INET6, "::1", cfg->trusted_proxies[1].addr);
	cfg->trusted_proxies[1].prefix = 128;
	cfg->ntrusted = 2;
	return 0;
}

sluice_config_t *sluice_config_default(void)
{
	sluice_config_t *cfg = malloc(sizeof(*cfg));
	sluice_rule_t *r;
	sluice_rate_t rate;

	if (!cfg)
		return NULL;
	sluice_config_init_defaults(cfg);
	cfg->listen = strdup("127.0.0.1:8080");
	cfg->store.key_prefix = strdup("sluice:");
	cfg->rules = calloc(1, sizeof(*cfg->rules));
	if (!cfg->listen || !cfg->store.key_prefix || !cfg->rules ||
	    default_trusted(cfg) < 0)
		goto fail;
	cfg->nrules = 1;
	r = &cfg->rules[0];
	r->name = strdup("default");
	r->limits.name = strdup("default");
	if (!r->name || !r->limits.name)
		goto fail;
	r->cost = 1;
	r->on_store_error = SLUICE_FAIL_OPEN;
	r->sources[0].parts[0].kind = SLUICE_KEY_HEADER;
	r->sources[0].parts[0].header = strdup("x-user-id");
	r->sources[0].nparts = 1;
	r->sources[1].parts[0].kind = SLUICE_KEY_IP;
	r->sources[1].nparts = 1;
	r->nsources = 2;
	if (!r->sources[0].parts[0].header)
		goto fail;
	if (sluice_rate_parse("2/s", &rate, NULL, 0) < 0 ||
	    sluice_limit_init(&r->limits.limits[0], 100, &rate, NULL, 0) < 0)
		goto fail;
	r->limits.nlimits = 1;
	return cfg;
fail:
	sluice_config_free(cfg);
	return NULL;
}

/* ------------------------------------------------------------- freeing */

static void free_rule(sluice_rule_t *r)
{
	size_t i, j;

	free(r->name);
	for (i = 0; i < r->nmethods; i++)
		free(r->methods[i]);
	free(r->methods);
	free(r->path);
	for (i = 0; i < r->nsources; i++)
		for (j = 0; j < r->sources[i].nparts; j++)
			free(r->sources[i].parts[j].header);
	free(r->limits.name);
	for (i = 0; i < r->ntiers; i++)
		free(r->tiers[i].name);
	free(r->tiers);
	free(r->tier_header);
}

void sluice_config_free(sluice_config_t *cfg)
{
	size_t i;

	if (!cfg)
		return;
	free(cfg->path);
	free(cfg->listen);
	free(cfg->store.url);
	for (i = 0; i < cfg->store.nseeds; i++)
		free(cfg->store.seeds[i]);
	free(cfg->store.seeds);
	free(cfg->store.key_prefix);
	free(cfg->trusted_proxies);
	for (i = 0; i < cfg->nrules; i++)
		free_rule(&cfg->rules[i]);
	free(cfg->rules);
	free(cfg);
}

/* ------------------------------------------------------------- loading */

sluice_config_t *sluice_config_parse(const char *name, const char *text,
				     size_t len, char *err, size_t errlen)
{
	(void)text;
	(void)len;
	snprintf(err, errlen, "%s:1: YAML configuration not supported yet",
		 name);
	return NULL;
}

sluice_config_t *sluice_config_load(const char *path, char *err, size_t errlen)
{
	return sluice_config_parse(path, "", 0, err, errlen);
}
