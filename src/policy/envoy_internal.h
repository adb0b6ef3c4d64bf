/*
 * envoy_internal.h -- between the loader of an envoyproxy/ratelimit
 * directory (envoy_config.c) and the parser of one of its files
 * (envoy_file.c).
 */
#ifndef SLUICE_POLICY_ENVOY_INTERNAL_H
#define SLUICE_POLICY_ENVOY_INTERNAL_H

#include "policy/envoy_config.h"

/*
 * Parses one file's document (root) into dom: its domain and descriptor
 * tree, the nodes pointing at `file` (cfg's copy of its path).  Errors go
 * to y ("FILE:LINE: ...").  Returns 0, or -1 after an error.
 */
int sluice_envoy_parse_file(sluice_yaml_t *y, sluice_envoy_config_t *cfg,
			    const char *file, yaml_node_t *root,
			    sluice_envoy_domain_t *dom);

/* "a" sep "b" [sep2 "c"] (c may be NULL: "a" sep "b"), malloc'd; NULL
 * when out of memory. */
char *sluice_envoy_join(const char *a, const char *sep, const char *b,
			const char *sep2, const char *c);

/* 1 when both are NULL or both the same string. */
int sluice_envoy_same_str(const char *a, const char *b);

#endif /* SLUICE_POLICY_ENVOY_INTERNAL_H */
