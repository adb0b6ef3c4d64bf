/*
 * admin.c -- the `admin:` section: the bearer token that opens the
 * admin endpoints (POST /v1/reset, /v1/refund, /v1/set; see admin.c).
 *
 *   admin: {token_file: /etc/sluice/admin-token}   # or {token: "..."}
 *   admin: {token_file: ..., listen: "127.0.0.1:9090"}
 *   admin: {token_file: ..., listen: ..., tls: {cert_file: ..., ...}}
 *
 * `listen` gives the endpoints a listener of their own (and only that
 * one serves them), so that they can stay on loopback while the decision
 * service faces a network; server.c opens it and warns when the admin
 * endpoints face a non-loopback address.
 * Without the section the endpoints answer 404: a service that never
 * configured them exposes nothing.  The token file is read at load (and
 * so again on SIGHUP); surrounding whitespace, such as the newline an
 * editor adds, is not part of the token.
 */
#include "policy/config/internal.h"
#include "util/file.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Short tokens can be guessed; 16 bytes is a 128-bit random hex token
 * halved, the least we accept. */
#define TOKEN_MIN 16
#define TOKEN_MAX 4096

/* The token's bytes must fit in an Authorization header. */
static int token_ok(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		    const char *s, size_t n)
{
	size_t i;

	if (n < TOKEN_MIN || n > TOKEN_MAX)
		return sluice_yaml_error(y, node,
					 "%s is %zu bytes; expected %d to %d "
					 "(e.g. `openssl rand -hex 32`)",
					 what, n, TOKEN_MIN, TOKEN_MAX);
	for (i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] == 0x7f)
			return sluice_yaml_error(y, node,
						 "%s holds a space or control "
						 "character; expected "
						 "printable text",
						 what);
	return 0;
}

/* The token file: a regular file owned by the user sluice runs as or root
 * (whoever owns it knows the token), opened without blocking; its content
 * is never quoted.  Surrounding whitespace (an editor's newline) is not
 * part of the token. */
static int read_token_file(sluice_yaml_t *y, yaml_node_t *node,
			   const char *path, char **out)
{
	char why[256], *buf;
	size_t n, b = 0;

	if (sluice_file_read(path, TOKEN_MAX + 64, SLUICE_FILE_OWNED, &buf, &n,
			     NULL, why, sizeof(why)) < 0)
		return sluice_yaml_error(y, node,
					 "admin.token_file \"%.200s\" %s; "
					 "expected a regular file owned by "
					 "the user sluice runs as or root, "
					 "holding the token",
					 path, why);
	while (n > 0 && isspace((unsigned char)buf[n - 1]))
		n--;
	while (b < n && isspace((unsigned char)buf[b]))
		b++;
	if (n == b) {
		free(buf);
		return sluice_yaml_error(y, node,
					 "admin.token_file \"%.200s\" holds no "
					 "token (it is empty or only "
					 "whitespace); expected 16 to 4096 "
					 "printable bytes",
					 path);
	}
	if (token_ok(y, node, "admin.token_file's token", buf + b, n - b) < 0) {
		free(buf);
		return -1;
	}
	memmove(buf, buf + b, n - b);
	buf[n - b] = '\0';
	*out = buf;
	return 0;
}

int sluice_config_parse_admin(sluice_yaml_t *y, yaml_node_t *node,
			      sluice_config_t *cfg)
{
	static const char *const keys[] = {"token", "token_file", "listen",
					   "tls", NULL};
	yaml_node_t *tok, *file, *listen, *tls;
	struct sockaddr_storage ss;
	const char *s;
	char msg[256];

	if (sluice_yaml_expect_map(y, node, "admin") < 0 ||
	    sluice_yaml_check_keys(y, node, "admin", keys) < 0)
		return -1;
	if ((listen = sluice_yaml_get(y, node, "listen"))) {
		if (sluice_yaml_string(y, listen, "admin.listen", &s) < 0)
			return -1;
		if (sluice_listen_parse(s, &ss, msg, sizeof(msg)) < 0)
			return sluice_yaml_error(y, listen, "admin.%s", msg);
		if (!(cfg->admin_listen = strdup(s)))
			return sluice_yaml_nomem(y, listen);
	}
	/* Without a listener of its own the admin endpoints are served on
	 * `listen`, with http.tls. */
	if ((tls = sluice_yaml_get(y, node, "tls"))) {
		if (!listen)
			return sluice_yaml_error(
				y, tls,
				"admin.tls without admin.listen: "
				"the admin endpoints are served "
				"on `listen`, under http.tls; "
				"expected admin.listen too");
		if (sluice_config_parse_tls(y, tls, "admin.tls",
					    &cfg->admin_tls) < 0)
			return -1;
	}
	tok = sluice_yaml_get(y, node, "token");
	file = sluice_yaml_get(y, node, "token_file");
	if (!tok == !file)
		return sluice_yaml_error(y, node,
					 "admin has %s; expected exactly one "
					 "of token_file (preferred) or token",
					 tok ? "both token and token_file"
					     : "no token");
	if (tok) {
		if (sluice_yaml_string(y, tok, "admin.token", &s) < 0 ||
		    token_ok(y, tok, "admin.token", s, strlen(s)) < 0)
			return -1;
		cfg->admin_token = strdup(s);
		return cfg->admin_token ? 0 : sluice_yaml_nomem(y, tok);
	}
	if (sluice_yaml_string(y, file, "admin.token_file", &s) < 0)
		return -1;
	return read_token_file(y, file, s, &cfg->admin_token);
}
