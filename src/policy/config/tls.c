/*
 * tls.c -- a listener's `tls:` block, spelled alike for the HTTP
 * listener (http.tls), the admin listener (admin.tls) and the gRPC one
 * (grpc.tls):
 *
 *   tls: {cert_file: server.crt, key_file: server.key,
 *         client_ca_file: ca.crt, client_sans: [envoy.example]}
 *
 * The files are read here once, to make a server context and throw it
 * away (util/tls_server.c), so that a certificate or key that cannot be
 * used is a config error with the block's line, at check-config, at the
 * start and at a reload (which is then refused), never a surprise at the
 * first connection.  The front ends read them again for their
 * connections, and again when they change.
 */
#include "policy/config/internal.h"
#include "util/tls_server.h"

#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A file of the block (when given): checked as every file sluice reads
 * is (docs/CONFIG.md, "Files another user may have touched"). */
static int tls_path(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		    const char *key, char **out)
{
	yaml_node_t *v = sluice_yaml_get(y, node, key);
	char field[64];

	if (!v)
		return 0;
	snprintf(field, sizeof(field), "%s.%s", what, key);
	return sluice_config_parse_pem_file(y, v, field, out);
}

static int parse_sans(sluice_yaml_t *y, yaml_node_t *v, const char *what,
		      sluice_tls_server_config_t *t)
{
	char field[64];
	yaml_node_t *item;
	const char *s;
	size_t i, n;
	int rc = 0;

	snprintf(field, sizeof(field), "%s.client_sans", what);
	if (sluice_yaml_expect_seq(y, v, field) < 0)
		return -1;
	n = sluice_yaml_seq_len(v);
	if (n > SLUICE_TLS_MAX_SANS)
		return sluice_yaml_error(y, v,
					 "%s holds %zu names; expected at most "
					 "%d",
					 field, n, SLUICE_TLS_MAX_SANS);
	if (!t->client_ca_file)
		return sluice_yaml_error(y, v,
					 "%s without client_ca_file: no client "
					 "certificate is asked for; expected "
					 "client_ca_file too",
					 field);
	for (i = 0; i < n; i++) {
		item = sluice_yaml_seq_at(y, v, i);
		if (!item || sluice_yaml_string(y, item, field, &s) < 0) {
			rc = -1;
			continue;
		}
		if (!(t->client_sans[t->nclient_sans] = strdup(s)))
			return sluice_yaml_nomem(y, item);
		t->nclient_sans++;
	}
	return rc;
}

int sluice_config_parse_tls(sluice_yaml_t *y, yaml_node_t *node,
			    const char *what, sluice_tls_server_config_t *t)
{
	static const char *const keys[] = {
		"cert_file", "key_file", "client_ca_file", "client_sans", NULL};
	yaml_node_t *v;
	SSL_CTX *ctx;
	char err[512];

	if (sluice_yaml_expect_map(y, node, what) < 0 ||
	    sluice_yaml_check_keys(y, node, what, keys) < 0)
		return -1;
	if (tls_path(y, node, what, "cert_file", &t->cert_file) < 0 ||
	    tls_path(y, node, what, "key_file", &t->key_file) < 0 ||
	    tls_path(y, node, what, "client_ca_file", &t->client_ca_file) < 0)
		return -1;
	if (!t->cert_file || !t->key_file)
		return sluice_yaml_error(y, node,
					 "%s needs cert_file and key_file; "
					 "expected both (PEM)",
					 what);
	if ((v = sluice_yaml_get(y, node, "client_sans")) &&
	    parse_sans(y, v, what, t) < 0)
		return -1;
	/* The files as the listener will read them (ALPN aside). */
	if (!(ctx = sluice_tls_ctx_build(t, what, NULL, err, sizeof(err))))
		return sluice_yaml_error(y, node, "%s", err);
	SSL_CTX_free(ctx);
	return 0;
}
