/*
 * internal.h -- between the loader of an envoyproxy/ratelimit
 * directory (config.c) and the parser of one of its files
 * (file.c).
 */
#ifndef SLUICE_POLICY_ENVOY_INTERNAL_H
#define SLUICE_POLICY_ENVOY_INTERNAL_H

#include "policy/envoy/config.h"

#include <sys/stat.h>

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

/*
 * The envoy config directory as the loader reads it (watch.c):
 * `file` for each *.yaml / *.yml regular file (symlinks followed) in dir
 * and its subdirectories, down to SLUICE_ENVOY_MAX_DIR_DEPTH levels, as
 * envoyproxy/ratelimit reads nested folders; `skip` (may be NULL) for
 * every other entry, with why it was skipped (dot entries, other names,
 * what is not a file).  A nonzero from `file` stops the walk and is
 * returned; -1 (errno set) when dir itself cannot be read.
 */
typedef int (*sluice_envoy_file_cb)(void *arg, const char *path,
				    const struct stat *st);
typedef void (*sluice_envoy_skip_cb)(void *arg, const char *path,
				     const char *why);
int sluice_envoy_walk(const char *dir, sluice_envoy_file_cb file,
		      sluice_envoy_skip_cb skip, void *arg);

/* 1 when both are NULL or both the same string. */
int sluice_envoy_same_str(const char *a, const char *b);

#endif /* SLUICE_POLICY_ENVOY_INTERNAL_H */
