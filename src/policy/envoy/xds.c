/*
 * xds.c -- the `envoy.xds:` settings (xds.h): parsed, copied
 * with the `envoy:` settings, compared across reloads.
 */
#include "policy/envoy/xds.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int pending;

int sluice_envoy_xds_pending(void)
{
	return atomic_load(&pending);
}

void sluice_envoy_xds_set_pending(int on)
{
	atomic_store(&pending, on);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void free_meta(char **v, size_t n)
{
	size_t i;

	for (i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* n strings copied into *out (NULL when n is 0); -1 out of memory. */
static int copy_strs(char *const *v, size_t n, char ***out)
{
	size_t i;

	*out = NULL;
	if (!n)
		return 0;
	if (!(*out = calloc(n, sizeof(**out))))
		return -1;
	for (i = 0; i < n; i++)
		if (!((*out)[i] = strdup(v[i])))
			return -1;
	return 0;
}

static int same_strs(char *const *a, char *const *b, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(a[i], b[i]) != 0)
			return 0;
	return 1;
}

void sluice_envoy_xds_free(sluice_envoy_xds_t *x)
{
	if (!x)
		return;
	free(x->server);
	free(x->host);
	free(x->port);
	free(x->node_id);
	free(x->cluster);
	free(x->ca_file);
	free(x->cert_file);
	free(x->key_file);
	free(x->server_name);
	free_meta(x->meta_keys, x->nmeta);
	free_meta(x->meta_values, x->nmeta);
	free_meta(x->header_names, x->nheaders);
	free_meta(x->header_values, x->nheaders);
	free(x->where);
	free(x);
}

sluice_envoy_xds_t *sluice_envoy_xds_copy(const sluice_envoy_xds_t *x)
{
	sluice_envoy_xds_t *c;

	if (!x || !(c = calloc(1, sizeof(*c))))
		return NULL;
	c->tls = x->tls;
	c->server = dup_or_null(x->server);
	c->host = dup_or_null(x->host);
	c->port = dup_or_null(x->port);
	c->node_id = dup_or_null(x->node_id);
	c->cluster = dup_or_null(x->cluster);
	c->ca_file = dup_or_null(x->ca_file);
	c->cert_file = dup_or_null(x->cert_file);
	c->key_file = dup_or_null(x->key_file);
	c->server_name = dup_or_null(x->server_name);
	c->where = dup_or_null(x->where);
	c->nmeta = x->nmeta;
	c->nheaders = x->nheaders;
	if (copy_strs(x->meta_keys, x->nmeta, &c->meta_keys) < 0 ||
	    copy_strs(x->meta_values, x->nmeta, &c->meta_values) < 0 ||
	    copy_strs(x->header_names, x->nheaders, &c->header_names) < 0 ||
	    copy_strs(x->header_values, x->nheaders, &c->header_values) < 0 ||
	    (x->where && !c->where) || !c->server || !c->host || !c->port ||
	    !c->node_id || !c->cluster || (x->ca_file && !c->ca_file) ||
	    (x->cert_file && !c->cert_file) || (x->key_file && !c->key_file) ||
	    (x->server_name && !c->server_name)) {
		sluice_envoy_xds_free(c);
		return NULL;
	}
	return c;
}

static int same(const char *a, const char *b)
{
	return a && b ? strcmp(a, b) == 0 : a == b;
}

int sluice_envoy_xds_same(const sluice_envoy_xds_t *a,
			  const sluice_envoy_xds_t *b)
{
	if (!a || !b)
		return a == b;
	return a->tls == b->tls && same(a->server, b->server) &&
	       same(a->node_id, b->node_id) && same(a->cluster, b->cluster) &&
	       same(a->ca_file, b->ca_file) &&
	       same(a->cert_file, b->cert_file) &&
	       same(a->key_file, b->key_file) &&
	       same(a->server_name, b->server_name) && a->nmeta == b->nmeta &&
	       same_strs(a->meta_keys, b->meta_keys, a->nmeta) &&
	       same_strs(a->meta_values, b->meta_values, a->nmeta) &&
	       a->nheaders == b->nheaders &&
	       same_strs(a->header_names, b->header_names, a->nheaders) &&
	       same_strs(a->header_values, b->header_values, a->nheaders);
}

void sluice_envoy_texts_free(sluice_envoy_text_t *t, size_t n)
{
	size_t i;

	for (i = 0; t && i < n; i++) {
		free(t[i].name);
		free(t[i].text);
	}
	free(t);
}

/* "HOST:PORT", "[V6]:PORT": host and port apart, the port 1-65535. */
static int split_server(sluice_yaml_t *y, yaml_node_t *v, const char *s,
			sluice_envoy_xds_t *x)
{
	const char *colon, *host = s, *hend;
	char *end;
	unsigned long port;

	if (s[0] == '[') {
		hend = strchr(s, ']');
		colon = hend && hend[1] == ':' ? hend + 1 : NULL;
		host = s + 1;
	} else {
		colon = strrchr(s, ':');
		hend = colon;
		if (colon && memchr(s, ':', (size_t)(colon - s)))
			colon = NULL; /* a bare IPv6 address */
	}
	if (!colon || hend == host || strlen(s) > 255)
		return sluice_yaml_error(y, v,
					 "envoy.xds.server is \"%.80s\"; "
					 "expected HOST:PORT (an IPv6 address "
					 "in brackets)",
					 s);
	port = strtoul(colon + 1, &end, 10);
	if (!colon[1] || *end || port < 1 || port > 65535)
		return sluice_yaml_error(y, v,
					 "envoy.xds.server \"%.80s\" has no "
					 "port 1-65535; expected HOST:PORT",
					 s);
	x->host = strndup(host, (size_t)(hend - host));
	x->port = strdup(colon + 1);
	x->server = strdup(s);
	return x->host && x->port && x->server ? 0 : sluice_yaml_nomem(y, v);
}

/* A file path, against the directory of base, that must be readable. */
static int parse_path(sluice_yaml_t *y, yaml_node_t *v, const char *what,
		      const char *base, char **out)
{
	const char *s, *slash = base ? strrchr(base, '/') : NULL;
	size_t n;

	if (sluice_yaml_string(y, v, what, &s) < 0)
		return -1;
	if (!*s)
		return sluice_yaml_error(y, v, "%s is empty; expected a file",
					 what);
	if (s[0] == '/' || !slash) {
		*out = strdup(s);
	} else {
		n = (size_t)(slash - base) + 1 + strlen(s) + 1;
		if ((*out = malloc(n)))
			snprintf(*out, n, "%.*s/%s", (int)(slash - base), base,
				 s);
	}
	if (!*out)
		return sluice_yaml_nomem(y, v);
	if (access(*out, R_OK) != 0)
		return sluice_yaml_error(y, v,
					 "%s %.200s cannot be read; expected a "
					 "readable PEM file",
					 what, *out);
	return 0;
}

static int parse_tls(sluice_yaml_t *y, yaml_node_t *node, const char *base,
		     sluice_envoy_xds_t *x)
{
	static const char *const keys[] = {"ca", "cert", "key", "server_name",
					   NULL};
	yaml_node_t *v, *cert, *key;
	const char *s;
	int rc = 0;

	x->tls = 1;
	if (sluice_yaml_is_null(node))
		return 0;
	if (sluice_yaml_expect_map(y, node, "envoy.xds.tls") < 0 ||
	    sluice_yaml_check_keys(y, node, "envoy.xds.tls", keys) < 0)
		return -1;
	if ((v = sluice_yaml_get(y, node, "ca")) &&
	    parse_path(y, v, "envoy.xds.tls.ca", base, &x->ca_file) < 0)
		rc = -1;
	cert = sluice_yaml_get(y, node, "cert");
	key = sluice_yaml_get(y, node, "key");
	if (!cert != !key)
		return sluice_yaml_error(y, cert ? cert : key,
					 "envoy.xds.tls has %s without %s; "
					 "expected both cert and key (a client "
					 "certificate) or neither",
					 cert ? "cert" : "key",
					 cert ? "key" : "cert");
	if (cert &&
	    (parse_path(y, cert, "envoy.xds.tls.cert", base, &x->cert_file) <
		     0 ||
	     parse_path(y, key, "envoy.xds.tls.key", base, &x->key_file) < 0))
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "server_name"))) {
		if (sluice_yaml_string(y, v, "envoy.xds.tls.server_name", &s) <
		    0)
			rc = -1;
		else if (!*s || strlen(s) > 253)
			rc = sluice_yaml_error(y, v,
					       "envoy.xds.tls.server_name is "
					       "empty or too long; expected "
					       "a host name");
		else if (!(x->server_name = strdup(s)))
			return sluice_yaml_nomem(y, v);
	}
	return rc;
}

static int parse_name(sluice_yaml_t *y, yaml_node_t *v, const char *what,
		      char **out)
{
	const char *s;

	if (sluice_yaml_string(y, v, what, &s) < 0)
		return -1;
	if (strlen(s) > 1024)
		return sluice_yaml_error(y, v,
					 "%s is %zu bytes; expected at most "
					 "1024",
					 what, strlen(s));
	free(*out);
	return (*out = strdup(s)) ? 0 : sluice_yaml_nomem(y, v);
}

/* One entry of a {KEY: VALUE} block, checked; it may rewrite the key in
 * place, and add up the block's size in *bytes.  0, or -1 after an
 * error. */
typedef int (*pair_check_fn)(sluice_yaml_t *y, yaml_node_t *kn, yaml_node_t *vn,
			     char *key, const char *value, size_t *bytes);

/* A {KEY: VALUE} block of strings (what: its name in errors) into *keys
 * and *values, in the order written: at most max entries, each checked,
 * then each key once. */
static int parse_pairs(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		       size_t max, pair_check_fn check, char ***keys,
		       char ***values, size_t *n)
{
	yaml_node_pair_t *p;
	size_t count, bytes = 0;
	char wk[64], wv[64];

	if (sluice_yaml_is_null(node))
		return 0;
	if (sluice_yaml_expect_map(y, node, what) < 0)
		return -1;
	count = (size_t)(node->data.mapping.pairs.top -
			 node->data.mapping.pairs.start);
	if (count > max)
		return sluice_yaml_error(y, node,
					 "%s has %zu entries; expected at "
					 "most %zu",
					 what, count, max);
	if (count && (!(*keys = calloc(count, sizeof(char *))) ||
		      !(*values = calloc(count, sizeof(char *)))))
		return sluice_yaml_nomem(y, node);
	snprintf(wk, sizeof(wk), "%s key", what);
	snprintf(wv, sizeof(wv), "%s value", what);
	for (p = node->data.mapping.pairs.start;
	     p < node->data.mapping.pairs.top; p++) {
		yaml_node_t *kn = sluice_yaml_node(y, p->key);
		yaml_node_t *vn = sluice_yaml_node(y, p->value);
		const char *k, *v;
		size_t i;

		if (sluice_yaml_string(y, kn, wk, &k) < 0 ||
		    sluice_yaml_string(y, vn, wv, &v) < 0)
			return -1;
		i = (*n)++; /* freed with the block from here on */
		(*keys)[i] = strdup(k);
		(*values)[i] = strdup(v);
		if (!(*keys)[i] || !(*values)[i])
			return sluice_yaml_nomem(y, kn);
		if (check(y, kn, vn, (*keys)[i], v, &bytes) < 0)
			return -1;
		k = (*keys)[i]; /* as checked */
		while (i-- > 0)
			if (strcmp((*keys)[i], k) == 0)
				return sluice_yaml_error(
					y, kn,
					"%s has '%.100s' twice; expected each "
					"key once",
					what, k);
	}
	return 0;
}

/* node_metadata: {KEY: VALUE}: Node.metadata's fields, each a string, as
 * envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_METADATA="k1=v1,k2=v2"
 * gives them. */
static int check_meta(sluice_yaml_t *y, yaml_node_t *kn, yaml_node_t *vn,
		      char *key, const char *value, size_t *bytes)
{
	if (strlen(key) > 1024 || strlen(value) > 1024)
		return sluice_yaml_error(y, kn,
					 "envoy.xds.node_metadata '%.100s' is "
					 "over 1024 bytes; expected less",
					 key);
	return 0;
}

/* What a call's own metadata may not name: HTTP/2's connection headers,
 * what the client sends itself, and gRPC's own (grpc-*). */
static int reserved_header(const char *name)
{
	static const char *const names[] = {"content-type",	 "te",
					    "user-agent",	 "host",
					    "connection",	 "keep-alive",
					    "proxy-connection",	 "upgrade",
					    "transfer-encoding", NULL};
	size_t i;

	for (i = 0; names[i]; i++)
		if (strcmp(name, names[i]) == 0)
			return 1;
	return strncmp(name, "grpc-", 5) == 0;
}

/* headers: {NAME: VALUE}: metadata on the ADS call (an authorization a
 * control plane asks for), as envoyproxy/ratelimit's
 * CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS="k1:v1,k2:v2" gives it.  An
 * entry's name (lowercased in place, as HTTP/2 requires and grpc-go
 * does) and value are checked as gRPC's spec has them: a name of 0-9
 * a-z - _ ., a value of printable ASCII; *bytes adds up the block.  No
 * message quotes the value: it may be a secret. */
static int check_header(sluice_yaml_t *y, yaml_node_t *kn, yaml_node_t *vn,
			char *name, const char *value, size_t *bytes)
{
	size_t i, vlen = strlen(value);

	if (name[0] == ':')
		return sluice_yaml_error(y, kn,
					 "envoy.xds.headers '%.100s' is a "
					 "pseudo-header; expected a header of "
					 "the call's own (sluice sets :method, "
					 ":scheme, :path and :authority)",
					 name);
	for (i = 0; name[i]; i++) {
		name[i] = (char)tolower((unsigned char)name[i]);
		if (!isdigit((unsigned char)name[i]) &&
		    !(name[i] >= 'a' && name[i] <= 'z') &&
		    !strchr("-_.", name[i]))
			return sluice_yaml_error(
				y, kn,
				"envoy.xds.headers '%.100s' is not a gRPC "
				"metadata name; expected letters, digits, "
				"'-', '_' and '.'",
				name);
	}
	if (!i || i > 256)
		return sluice_yaml_error(y, kn,
					 "envoy.xds.headers has a name of %zu "
					 "bytes; expected 1 to 256",
					 i);
	if (i > 4 && strcmp(name + i - 4, "-bin") == 0)
		return sluice_yaml_error(y, kn,
					 "envoy.xds.headers '%.100s' is binary "
					 "metadata (-bin); expected a text "
					 "header",
					 name);
	if (reserved_header(name))
		return sluice_yaml_error(y, kn,
					 "envoy.xds.headers '%.100s' is set by "
					 "the client or reserved by HTTP/2 or "
					 "gRPC; expected a header of your own "
					 "(authorization, x-...)",
					 name);
	for (i = 0; i < vlen; i++)
		if ((unsigned char)value[i] < 0x20 ||
		    (unsigned char)value[i] > 0x7e)
			return sluice_yaml_error(
				y, vn,
				"envoy.xds.headers '%.100s' has a byte that "
				"is not printable ASCII in its value (not "
				"shown); expected text a gRPC header carries",
				name);
	if (vlen && (value[0] == ' ' || value[vlen - 1] == ' '))
		return sluice_yaml_error(y, vn,
					 "envoy.xds.headers '%.100s' has a "
					 "value that starts or ends with a "
					 "space; expected none (HTTP/2 refuses "
					 "it)",
					 name);
	*bytes += strlen(name) + vlen + 32;
	if (*bytes > SLUICE_XDS_MAX_HEADER_BYTES)
		return sluice_yaml_error(y, vn,
					 "envoy.xds.headers come to over %d "
					 "bytes (names, values and 32 bytes "
					 "each, as HTTP/2 counts them); "
					 "expected at most %d",
					 SLUICE_XDS_MAX_HEADER_BYTES,
					 SLUICE_XDS_MAX_HEADER_BYTES);
	return 0;
}

int sluice_envoy_xds_parse(sluice_yaml_t *y, yaml_node_t *node,
			   const char *base, sluice_envoy_xds_t **out)
{
	static const char *const keys[] = {"server", "node_id",	      "cluster",
					   "tls",    "node_metadata", "headers",
					   NULL};
	sluice_envoy_xds_t *x;
	yaml_node_t *v;
	const char *s;
	int rc = 0;

	*out = NULL;
	if (sluice_yaml_expect_map(y, node, "envoy.xds") < 0 ||
	    sluice_yaml_check_keys(y, node, "envoy.xds", keys) < 0)
		return -1;
	if (!(x = calloc(1, sizeof(*x))))
		return sluice_yaml_nomem(y, node);
	if (!(v = sluice_yaml_get(y, node, "server")))
		rc = sluice_yaml_error(y, node,
				       "envoy.xds has no server; expected "
				       "server: HOST:PORT of the control "
				       "plane");
	else if (sluice_yaml_string(y, v, "envoy.xds.server", &s) < 0 ||
		 split_server(y, v, s, x) < 0)
		rc = -1;
	if (!(v = sluice_yaml_get(y, node, "node_id")))
		rc = sluice_yaml_error(y, node,
				       "envoy.xds has no node_id; expected "
				       "the node id the control plane serves "
				       "(Envoy Gateway: envoy-ratelimit)");
	else if (parse_name(y, v, "envoy.xds.node_id", &x->node_id) < 0)
		rc = -1;
	else if (!*x->node_id)
		rc = sluice_yaml_error(y, v,
				       "envoy.xds.node_id is empty; expected "
				       "the node id the control plane serves");
	if ((v = sluice_yaml_get(y, node, "cluster"))) {
		if (parse_name(y, v, "envoy.xds.cluster", &x->cluster) < 0)
			rc = -1;
	} else if (!(x->cluster = strdup(""))) {
		rc = sluice_yaml_nomem(y, node);
	}
	if ((v = sluice_yaml_get(y, node, "tls")) &&
	    parse_tls(y, v, base, x) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "node_metadata")) &&
	    parse_pairs(y, v, "envoy.xds.node_metadata",
			SLUICE_XDS_MAX_NODE_META, check_meta, &x->meta_keys,
			&x->meta_values, &x->nmeta) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "headers")) &&
	    parse_pairs(y, v, "envoy.xds.headers", SLUICE_XDS_MAX_HEADERS,
			check_header, &x->header_names, &x->header_values,
			&x->nheaders) < 0)
		rc = -1;
	if (rc == 0 && x->tls &&
	    asprintf(&x->where, "%s:%d", y->name ? y->name : "",
		     sluice_yaml_line(sluice_yaml_get(y, node, "tls"))) < 0) {
		x->where = NULL;
		rc = sluice_yaml_nomem(y, node);
	}
	if (rc < 0) {
		sluice_envoy_xds_free(x);
		return -1;
	}
	*out = x;
	return 0;
}
