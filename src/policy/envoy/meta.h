/*
 * meta.h -- metadata as envoyproxy/ratelimit passes it on: a
 * descriptor's `metadata:` in the config (any YAML mapping), and the
 * dynamic_metadata of a RateLimitResponse (a google.protobuf.Struct)
 * that envoy.response_dynamic_metadata adds, as envoyproxy/ratelimit
 * with RESPONSE_DYNAMIC_METADATA=true:
 *
 *   {"domain": "api",
 *    "descriptors": [{"entries": ["user=alice"],           # KEY=VALUE
 *                     "limit": "requests_per_unit:10 unit:HOUR",
 *                     "hitsAddend": 2}],                   # when given
 *    "hitsAddend": 3,                                      # when not 0
 *    "metadata": {...}}   # the config metadata of every descriptor that
 *                         # passed (a limit, not over), merged
 *
 * A plain tree (no protobuf here): each front end writes it in its own
 * format (src/grpc/rls.c a Struct, src/serve/rls_json.c JSON).
 */
#ifndef SLUICE_POLICY_ENVOY_META_H
#define SLUICE_POLICY_ENVOY_META_H

#include "policy/config/yaml.h"
#include "util/buf.h"

#include <stddef.h>

/* google.protobuf.Value's kinds. */
typedef enum {
	SLUICE_META_NULL = 0,
	SLUICE_META_NUMBER,
	SLUICE_META_STRING,
	SLUICE_META_BOOL,
	SLUICE_META_STRUCT,
	SLUICE_META_LIST,
} sluice_meta_kind_t;

typedef struct sluice_meta_s {
	sluice_meta_kind_t kind;
	double number;
	int boolean;
	char *string;
	/* STRUCT: keys[i] is items[i]'s name (each once, in order);
	 * LIST: items alone. */
	char **keys;
	struct sluice_meta_s *items;
	size_t n;
} sluice_meta_t;

struct sluice_rls_request_s;
struct sluice_rls_status_s;

/* A YAML mapping as a STRUCT (*out, malloc'd): plain scalars that read
 * as numbers, true/false or null become those, anything else a string.
 * Errors go to y ("FILE:LINE: ..."); returns 0, or -1. */
int sluice_meta_from_yaml(sluice_yaml_t *y, yaml_node_t *node,
			  sluice_meta_t **out);
/* Frees a tree made here (NULL is nothing). */
void sluice_meta_free(sluice_meta_t *m);

/* The response's dynamic_metadata for req, whose statuses[i] carry the
 * config metadata of the descriptors that matched; NULL when out of
 * memory. */
sluice_meta_t *sluice_meta_response(const struct sluice_rls_request_s *req,
				    const struct sluice_rls_status_s *st);

/* m as JSON (what protojson writes for a google.protobuf.Struct). */
void sluice_meta_json(sluice_buf_t *b, const sluice_meta_t *m);

#endif /* SLUICE_POLICY_ENVOY_META_H */
