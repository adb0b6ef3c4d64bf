/*
 * grpc.c -- the `grpc:` section: where the gRPC listener (Envoy's
 * rate limit service, src/grpc/) accepts connections.
 *
 *   grpc: {listen: "127.0.0.1:8081"}     # or "unix:/run/sluice/grpc.sock"
 *   grpc: {listen: ..., max_message_bytes: 65536}
 *   grpc: {listen: ..., max_connection_age_ms: 86400000,
 *          max_connection_age_grace_ms: 3600000}     # 0: never
 *   grpc: {listen: ..., tls: {cert_file: server.crt, key_file: server.key,
 *          client_ca_file: ca.crt, client_sans: [envoy.example]}}
 *
 * tls is tls.c's (as http.tls and admin.tls are); its files are
 * read by the gRPC front end (src/grpc/tls.c over util/tls_server.c), at
 * the start, at every reload and when they change.
 *
 * Without the section (and without --grpc-listen) there is no gRPC
 * listener.  The address, like `listen`, is set up once: a reload that
 * changes it is logged and not applied (reload.c).
 */
#include "policy/config/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#define UNIX_PREFIX "unix:"

int sluice_grpc_listen_parse(const char *text, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	struct sockaddr_un un;
	const char *path;

	if (strncmp(text, UNIX_PREFIX, strlen(UNIX_PREFIX)) != 0)
		return sluice_listen_parse(text, &ss, err, errlen);
	path = text + strlen(UNIX_PREFIX);
	if (path[0] != '/' || strlen(path) >= sizeof(un.sun_path)) {
		if (err && errlen)
			snprintf(err, errlen,
				 "grpc listen address \"%.120s\" is not valid; "
				 "expected unix: and an absolute path shorter "
				 "than %zu bytes, e.g. unix:/run/sluice/"
				 "grpc.sock",
				 text, sizeof(un.sun_path));
		return SLUICE_EINVAL;
	}
	return 0;
}

int sluice_config_parse_grpc(sluice_yaml_t *y, yaml_node_t *node,
			     sluice_config_t *cfg)
{
	static const char *const keys[] = {"listen",
					   "max_message_bytes",
					   "max_connection_age_ms",
					   "max_connection_age_grace_ms",
					   "tls",
					   NULL};
	yaml_node_t *v;
	const char *s;
	char msg[256];
	uint64_t u;
	int rc = 0;

	if (sluice_yaml_expect_map(y, node, "grpc") < 0 ||
	    sluice_yaml_check_keys(y, node, "grpc", keys) < 0)
		return -1;
	if ((v = sluice_yaml_get(y, node, "listen"))) {
		if (sluice_yaml_string(y, v, "grpc.listen", &s) < 0) {
			rc = -1;
		} else if (sluice_grpc_listen_parse(s, msg, sizeof(msg)) < 0) {
			rc = sluice_yaml_error(y, v, "grpc.listen: %s", msg);
		} else {
			free(cfg->grpc.listen);
			if (!(cfg->grpc.listen = strdup(s)))
				return sluice_yaml_nomem(y, v);
		}
	}
	if ((v = sluice_yaml_get(y, node, "max_message_bytes"))) {
		if (sluice_yaml_uint(y, v, "grpc.max_message_bytes", 1024,
				     SLUICE_GRPC_MAX_MESSAGE_CAP, &u) < 0)
			rc = -1;
		else
			cfg->grpc.max_message_bytes = (size_t)u;
	}
	if ((v = sluice_yaml_get(y, node, "tls")) &&
	    sluice_config_parse_tls(y, v, "grpc.tls", &cfg->grpc.tls) < 0)
		rc = -1;
	/* A reload applies them to connections accepted after it. */
	if ((v = sluice_yaml_get(y, node, "max_connection_age_ms"))) {
		if (sluice_yaml_uint(y, v, "grpc.max_connection_age_ms", 0,
				     UINT32_MAX, &u) < 0)
			rc = -1;
		else
			cfg->grpc.max_age_ms = u, cfg->grpc.max_age_set = 1;
	}
	if ((v = sluice_yaml_get(y, node, "max_connection_age_grace_ms"))) {
		if (sluice_yaml_uint(y, v, "grpc.max_connection_age_grace_ms",
				     0, UINT32_MAX, &u) < 0)
			rc = -1;
		else
			cfg->grpc.max_age_grace_ms = u,
			cfg->grpc.max_age_grace_set = 1;
	}
	return rc;
}
