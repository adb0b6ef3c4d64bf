/*
 * proxy.c -- the `proxy:` setting: which headers of a /v1/check
 * request describe the request being decided (its method and URI).
 *
 *   proxy: nginx          X-Original-Method, X-Original-URI (the default)
 *   proxy: forward_auth   X-Forwarded-Method, X-Forwarded-Uri (Traefik
 *                         ForwardAuth, Caddy forward_auth, Authelia-style)
 *   proxy: envoy          none: the check request's own method, and its
 *                         path after /v1/check (ext_authz path_prefix)
 *   proxy: {method_header: x-orig-method, uri_header: x-orig-uri}
 *
 * Exactly one pair is read.  Reading the other pair too, as a fallback,
 * is what let a client behind a ForwardAuth proxy (which sets only
 * X-Forwarded-* and passes the client's own headers on) add
 * "X-Original-URI: /harmless" and pick the path its rules saw.  A reload
 * may change it (it is part of the config snapshot).
 */
#include "policy/config/internal.h"

#include <string.h>

/* The longest header name proxy: takes (lower-cased into cfg). */
#define HEADER_NAME_MAX (sizeof(((sluice_config_t *)0)->proxy_uri) - 1)

static int tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/* A header name into out (lower-case). */
static int header_name(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		       char *out)
{
	const char *s;
	size_t i, n;

	if (sluice_yaml_string(y, node, what, &s) < 0)
		return -1;
	n = strlen(s);
	for (i = 0; i < n && tchar((unsigned char)s[i]); i++)
		;
	if (n == 0 || i < n || n > HEADER_NAME_MAX)
		return sluice_yaml_error(y, node,
					 "%s \"%.80s\" is not a header name; "
					 "expected 1 to %zu letters, digits "
					 "or -, such as x-original-uri",
					 what, s, HEADER_NAME_MAX);
	for (i = 0; i <= n; i++)
		out[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
	return 0;
}

int sluice_config_parse_proxy(sluice_yaml_t *y, yaml_node_t *node,
			      sluice_config_t *cfg)
{
	static const char *const keys[] = {"method_header", "uri_header", NULL};
	static const struct {
		const char *name;
		const char *method, *uri;
	} kinds[] = {
		{"nginx", "x-original-method", "x-original-uri"},
		{"forward_auth", "x-forwarded-method", "x-forwarded-uri"},
		{"envoy", "", ""},
	};
	yaml_node_t *m, *u;
	const char *s;
	size_t i;

	if (node->type == YAML_SCALAR_NODE) {
		if (sluice_yaml_string(y, node, "proxy", &s) < 0)
			return -1;
		for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
			if (strcmp(s, kinds[i].name) == 0) {
				strcpy(cfg->proxy_method, kinds[i].method);
				strcpy(cfg->proxy_uri, kinds[i].uri);
				cfg->proxy_set = 1;
				return 0;
			}
		return sluice_yaml_error(y, node,
					 "proxy \"%.60s\" is not a proxy kind; "
					 "expected nginx, forward_auth, envoy "
					 "or {method_header, uri_header}",
					 s);
	}
	if (sluice_yaml_expect_map(y, node, "proxy") < 0 ||
	    sluice_yaml_check_keys(y, node, "proxy", keys) < 0)
		return -1;
	m = sluice_yaml_get(y, node, "method_header");
	u = sluice_yaml_get(y, node, "uri_header");
	if (!m || !u)
		return sluice_yaml_error(y, node,
					 "proxy has no %s; expected both "
					 "method_header and uri_header",
					 m ? "uri_header" : "method_header");
	if (header_name(y, m, "proxy.method_header", cfg->proxy_method) < 0 ||
	    header_name(y, u, "proxy.uri_header", cfg->proxy_uri) < 0)
		return -1;
	if (strcmp(cfg->proxy_method, cfg->proxy_uri) == 0)
		return sluice_yaml_error(y, u,
					 "proxy.uri_header is the same header "
					 "as method_header; expected two "
					 "headers");
	cfg->proxy_set = 1;
	return 0;
}

void sluice_config_proxy_headers(const sluice_config_t *cfg,
				 const char **method, const char **uri)
{
	if (!cfg->proxy_set) { /* the default: nginx */
		*method = "x-original-method";
		*uri = "x-original-uri";
		return;
	}
	*method = cfg->proxy_method[0] ? cfg->proxy_method : NULL;
	*uri = cfg->proxy_uri[0] ? cfg->proxy_uri : NULL;
}
