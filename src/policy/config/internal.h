/*
 * internal.h -- shared between the parts of the config reader
 * (config.c: the file and its top-level settings; rule.c: rules;
 * limits.c: lists of limits; override.c: overrides;
 * store.c, admin.c, proxy.c, grpc.c: their
 * sections; policy/envoy/settings.c: `envoy:`; yaml.c: the YAML walking,
 * file and string helpers they all use).
 */
#ifndef SLUICE_POLICY_CONFIG_INTERNAL_H
#define SLUICE_POLICY_CONFIG_INTERNAL_H

#include "policy/config/config.h"
#include "policy/config/yaml.h"
#include "util/file.h"

/* Longest rule or tier name: keeps store keys well inside
 * sluice_match_t.key. */
#define SLUICE_NAME_MAX 64

/* A config or overrides file larger than this is refused (it is surely
 * not one).  Room for 100,000 overrides with keys of up to 256 bytes
 * (their documented form takes 48 bytes with a 12-byte key). */
#define SLUICE_CONFIG_MAX_BYTES (32 * 1024 * 1024)

/* Replaces *dst with a copy of src: 0, or -1 when out of memory
 * (yaml.c). */
int sluice_config_set_string(char **dst, const char *src);

/* Parses `store:` into st (store.c); frees what it holds. */
int sluice_config_parse_store(sluice_yaml_t *y, yaml_node_t *node,
			      sluice_store_config_t *st);
void sluice_config_free_store(sluice_store_config_t *st);

/* Parses the `rules:` list into cfg->rules. */
int sluice_config_parse_rules(sluice_yaml_t *y, yaml_node_t *node,
			      sluice_config_t *cfg);

/* Parses `admin:` into cfg->admin_token (admin.c). */
int sluice_config_parse_admin(sluice_yaml_t *y, yaml_node_t *node,
			      sluice_config_t *cfg);

/* Parses `proxy:` into cfg->proxy_* (proxy.c). */
int sluice_config_parse_proxy(sluice_yaml_t *y, yaml_node_t *node,
			      sluice_config_t *cfg);
/* The `log:` section (log.c). */
int sluice_config_parse_log(sluice_yaml_t *y, yaml_node_t *node,
			    sluice_config_t *cfg);
/* Parses `grpc:` into cfg->grpc (grpc.c). */
int sluice_config_parse_grpc(sluice_yaml_t *y, yaml_node_t *node,
			     sluice_config_t *cfg);

/* A PEM file's path at node into *dst: a regular file, owned by the user
 * sluice runs as or root, not empty (store.c). */
int sluice_config_parse_pem_file(sluice_yaml_t *y, yaml_node_t *node,
				 const char *what, char **dst);

/* A listener's tls: block into t (tls.c), `what` ("http.tls")
 * naming it in messages; its files must make a server context. */
int sluice_config_parse_tls(sluice_yaml_t *y, yaml_node_t *node,
			    const char *what, sluice_tls_server_config_t *t);

/* A list of limits ([{capacity, rate}, ...]) into set (limits.c). */
int sluice_config_parse_limits(sluice_yaml_t *y, yaml_node_t *node,
			       sluice_limit_set_t *set, const char *what);

/* Reads a whole config or overrides file (yaml.c): a regular file owned
 * by the user sluice runs as or root; *quotable says whether messages may
 * quote it (sluice_file_t).  -1 with "FILE:1: ..." in err. */
int sluice_config_read_file(const char *path, char **out, size_t *outlen,
			    int *quotable, char *err, size_t errlen);
/* The same, trusting trust's owners as well (NULL: none). */
int sluice_config_read_file_trusted(const char *path,
				    const sluice_file_trust_t *trust,
				    char **out, size_t *outlen, int *quotable,
				    char *err, size_t errlen);

/* A rule's `overrides:` and/or `overrides_file:` (either may be NULL)
 * into r->overrides (override.c). */
int sluice_config_parse_overrides(sluice_yaml_t *y, yaml_node_t *inline_map,
				  yaml_node_t *file, sluice_rule_t *r,
				  const char *rule);
void sluice_config_free_overrides(sluice_rule_t *r);

#endif /* SLUICE_POLICY_CONFIG_INTERNAL_H */
