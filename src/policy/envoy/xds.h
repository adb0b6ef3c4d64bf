/*
 * xds.h -- envoy.xds: the rate limit config from a control plane
 * (Envoy Gateway, or any xDS server) instead of a directory, as
 * envoyproxy/ratelimit takes it with CONFIG_TYPE=GRPC_XDS_SOTW:
 *
 *   envoy:
 *     xds:
 *       server: "envoy-gateway.envoy-gateway-system:18001"   # HOST:PORT
 *       node_id: envoy-ratelimit      # CONFIG_GRPC_XDS_NODE_ID
 *       cluster: ratelimit            # optional (Node.cluster)
 *       tls:                          # optional: TLS to the server
 *         ca: /certs/ca.crt           # verifies it (else the system's)
 *         cert: /certs/tls.crt        # client certificate (mTLS), with
 *         key: /certs/tls.key
 *         server_name: envoy-gateway  # SNI and the name checked
 *       node_metadata: {k: v}         # CONFIG_GRPC_XDS_NODE_METADATA
 *       headers: {authorization: "Bearer ..."}  # metadata on the call
 *                                     #
 * (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS)
 *
 * What the settings are (parsed here, with the `envoy:` section); the
 * client that subscribes is src/xds, and each set of resources it
 * receives becomes a config through sluice_envoy_load_texts().  A reload
 * whose block differs starts a client with it in place of the running
 * one (serve/server.c).
 */
#ifndef SLUICE_POLICY_ENVOY_XDS_H
#define SLUICE_POLICY_ENVOY_XDS_H

#include "policy/config/yaml.h"

#include <stddef.h>

typedef struct sluice_envoy_xds_s {
	char *server; /* "HOST:PORT" as written */
	char *host;   /* without brackets */
	char *port;
	char *node_id;
	char *cluster; /* "" when not given */
	int tls;
	char *ca_file; /* NULL: the system's trust store */
	char *cert_file;
	char *key_file;
	char *server_name; /* NULL: host */
	/* Node.metadata: string values, in the order written. */
	char **meta_keys;
	char **meta_values;
	size_t nmeta;
	/* headers: the call's own metadata, names lowercased, in the order
	 * written.  A value may be a secret (a bearer token): it is sent,
	 * compared, never logged nor shown. */
	char **header_names;
	char **header_values;
	size_t nheaders;
	/* "FILE:LINE" of `tls:`, for errors found when its files are
	 * loaded (not compared: the same block elsewhere is the same). */
	char *where;
} sluice_envoy_xds_t;

/* node_metadata's entries at most. */
#define SLUICE_XDS_MAX_NODE_META 64
/* headers: entries at most, and their size in all as HTTP/2 counts a
 * header list (each name and value, and 32 bytes). */
#define SLUICE_XDS_MAX_HEADERS	    16
#define SLUICE_XDS_MAX_HEADER_BYTES 8192

/* One resource as text the file loader reads ("xds:NAME" in errors). */
typedef struct sluice_envoy_text_s {
	char *name;
	char *text;
	size_t len;
} sluice_envoy_text_t;

/*
 * Parses `xds:` (paths relative to the directory of `base`, sluice's
 * config file).  Errors go to y ("FILE:LINE: ...").  Returns 0, or -1.
 */
int sluice_envoy_xds_parse(sluice_yaml_t *y, yaml_node_t *node,
			   const char *base, sluice_envoy_xds_t **out);

sluice_envoy_xds_t *sluice_envoy_xds_copy(const sluice_envoy_xds_t *x);
void sluice_envoy_xds_free(sluice_envoy_xds_t *x);
/* 1 when both are NULL or say the same. */
int sluice_envoy_xds_same(const sluice_envoy_xds_t *a,
			  const sluice_envoy_xds_t *b);

void sluice_envoy_texts_free(sluice_envoy_text_t *t, size_t n);

/* 1 while envoy.xds runs and no config from it has been accepted yet
 * (any thread): the service is then not healthy (/readyz,
 * /healthcheck, gRPC health), as envoyproxy/ratelimit with
 * HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, so that no Envoy is sent to
 * a service that knows no limit.  Set by the client (src/xds). */
int sluice_envoy_xds_pending(void);
void sluice_envoy_xds_set_pending(int pending);

#endif /* SLUICE_POLICY_ENVOY_XDS_H */
