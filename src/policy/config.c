/*
 * config.c -- the configuration: its defaults, its lifetime, reading the
 * file and its top-level settings (listen, threads, store, trusted
 * proxies, http limits).  Rules are read by config_rule.c; the YAML
 * walking helpers live in config_yaml.c.  docs/CONFIG.md documents every
 * field; keep it in step.
 */
#include "envoy/config.h"
#include "policy/config_internal.h"
#include "sluice_redis.h"
#include "util/file.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------- defaults */

/* Fills the fields every config starts with (before the file overrides
 * them).  Allocates nothing. */
static void init_defaults(sluice_config_t *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->threads = 1;
	cfg->store.kind = SLUICE_STORE_MEMORY;
	cfg->store.max_keys = 1000000;
	cfg->store.timeout_ms = 50;
	cfg->store.connections = 1;
	cfg->store.tls.verify = 1;
	cfg->ipv6_prefix = 64;
	cfg->max_header_bytes = 8 * 1024;
	cfg->max_body_bytes = 16 * 1024;
	cfg->idle_timeout_ms = 30000;
}

static int default_trusted(sluice_config_t *cfg)
{
	cfg->trusted_proxies = calloc(2, sizeof(*cfg->trusted_proxies));
	if (!cfg->trusted_proxies)
		return -1;
	cfg->trusted_proxies[0].family = AF_INET;
	inet_pton(AF_INET, "127.0.0.1", cfg->trusted_proxies[0].addr);
	cfg->trusted_proxies[0].prefix = 32;
	cfg->trusted_proxies[1].family = AF_INET6;
	inet_pton(AF_INET6, "::1", cfg->trusted_proxies[1].addr);
	cfg->trusted_proxies[1].prefix = 128;
	cfg->ntrusted = 2;
	return 0;
}

/* A rule on every request with one limit; the caller sets its key. */
static int default_one(sluice_rule_t *r, const char *name, uint64_t capacity,
		       const char *rate_text)
{
	sluice_rate_t rate;

	r->name = strdup(name);
	r->limits.name = strdup(name);
	if (!r->name || !r->limits.name)
		return -1;
	r->cost = 1;
	r->on_store_error = SLUICE_FAIL_OPEN;
	if (sluice_rate_parse(rate_text, &rate, NULL, 0) < 0 ||
	    sluice_limit_init(&r->limits.limits[0], capacity, &rate, NULL, 0) <
		    0)
		return -1;
	r->limits.nlimits = 1;
	return 0;
}

/*
 * The classic policy: "default", 100 burst and 2/s per user, keyed on
 * x-user-id else the client IP; and "default-ip", a ceiling of 200 burst
 * and 4/s per client IP.  The ceiling is there because x-user-id is only
 * as trustworthy as whoever set it: a client that reaches sluice with a
 * header of its own choosing (a proxy that passes client headers through)
 * could otherwise mint a fresh bucket per request.  Twice a user's share
 * leaves room for a few users behind one address.
 */
static int default_rule(sluice_config_t *cfg)
{
	sluice_rule_t *r;

	cfg->rules = calloc(2, sizeof(*cfg->rules));
	if (!cfg->rules)
		return -1;
	cfg->nrules = 2;
	r = &cfg->rules[0];
	if (default_one(r, "default", 100, "2/s") < 0)
		return -1;
	r->sources[0].parts[0].kind = SLUICE_KEY_HEADER;
	r->sources[0].parts[0].header = strdup("x-user-id");
	r->sources[0].nparts = 1;
	r->sources[1].parts[0].kind = SLUICE_KEY_IP;
	r->sources[1].nparts = 1;
	r->nsources = 2;
	if (!r->sources[0].parts[0].header)
		return -1;
	r = &cfg->rules[1];
	if (default_one(r, "default-ip", 200, "4/s") < 0)
		return -1;
	r->sources[0].parts[0].kind = SLUICE_KEY_IP;
	r->sources[0].nparts = 1;
	r->nsources = 1;
	return 0;
}

sluice_config_t *sluice_config_default(void)
{
	sluice_config_t *cfg = malloc(sizeof(*cfg));

	if (!cfg)
		return NULL;
	init_defaults(cfg);
	cfg->listen = strdup("127.0.0.1:8080");
	cfg->store.key_prefix = strdup("sluice:");
	if (!cfg->listen || !cfg->store.key_prefix ||
	    default_trusted(cfg) < 0 || default_rule(cfg) < 0) {
		sluice_config_free(cfg);
		return NULL;
	}
	return cfg;
}

/* ------------------------------------------------------------- freeing */

static void free_rule(sluice_rule_t *r)
{
	size_t i, j;

	free(r->name);
	for (i = 0; i < r->nmethods; i++)
		free(r->methods[i]);
	free(r->methods);
	free(r->path);
	for (i = 0; i < r->nsources; i++)
		for (j = 0; j < r->sources[i].nparts; j++)
			free(r->sources[i].parts[j].header);
	free(r->limits.name);
	for (i = 0; i < r->ntiers; i++)
		free(r->tiers[i].name);
	free(r->tiers);
	free(r->tier_header);
	sluice_config_free_overrides(r);
}

static void free_rules(sluice_config_t *cfg)
{
	size_t i;

	for (i = 0; i < cfg->nrules; i++)
		free_rule(&cfg->rules[i]);
	free(cfg->rules);
	cfg->rules = NULL;
	cfg->nrules = 0;
}

void sluice_config_free(sluice_config_t *cfg)
{
	size_t i;

	if (!cfg)
		return;
	free(cfg->path);
	free(cfg->listen);
	free(cfg->store.url);
	free(cfg->store.shm_path);
	free(cfg->store.shm_group);
	for (i = 0; i < cfg->store.nseeds; i++)
		free(cfg->store.seeds[i]);
	free(cfg->store.seeds);
	free(cfg->store.key_prefix);
	free(cfg->store.tls.ca_file);
	free(cfg->store.tls.cert_file);
	free(cfg->store.tls.key_file);
	free(cfg->store.tls.server_name);
	free(cfg->store.sentinel.master);
	for (i = 0; i < cfg->store.sentinel.naddrs; i++)
		free(cfg->store.sentinel.addrs[i]);
	free(cfg->store.sentinel.addrs);
	free(cfg->store.sentinel.user);
	free(cfg->store.sentinel.password);
	free(cfg->trusted_proxies);
	free(cfg->admin_token);
	free(cfg->admin_listen);
	free(cfg->grpc.listen);
	sluice_envoy_config_free(cfg->envoy);
	free_rules(cfg);
	free(cfg);
}

/* --------------------------------------------------------------- store */

static int set_string(char **dst, const char *src)
{
	char *s = strdup(src);

	if (!s)
		return -1;
	free(*dst);
	*dst = s;
	return 0;
}

/* "host:port" with a host and a port from 1 to 65535 (no scheme, no
 * path: a db means nothing to a cluster node or a Sentinel). */
static int is_host_port(const char *s)
{
	const char *colon = strrchr(s, ':');
	size_t digits;

	if (!colon || colon == s || strstr(s, "://") || strchr(s, '/'))
		return 0;
	digits = strlen(colon + 1);
	return digits >= 1 && digits <= 5 &&
	       strspn(colon + 1, "0123456789") == digits &&
	       strtoul(colon + 1, NULL, 10) >= 1 &&
	       strtoul(colon + 1, NULL, 10) <= 65535;
}

/* redis://, rediss:// (TLS, with the defaults unless `tls:` says more) or
 * unix://.  With a Sentinel the URL gives the master's credentials, db
 * and scheme only, so a unix socket makes no sense there. */
static int parse_redis_url(sluice_yaml_t *y, yaml_node_t *node,
			   sluice_store_config_t *st, int sentinel)
{
	const char *url;
	char shown[160], why[256];

	if (sluice_yaml_string(y, node, "store.redis.url", &url) < 0)
		return -1;
	/* The URL is printed masked: it may hold a password. */
	sluice_redis_url_mask(url, shown, sizeof(shown));
	if (strncmp(url, "redis://", 8) != 0 &&
	    strncmp(url, "rediss://", 9) != 0 &&
	    strncmp(url, "unix://", 7) != 0)
		return sluice_yaml_error(
			y, node,
			"store.redis.url \"%.100s\" is not "
			"supported; expected "
			"redis://[user:password@]host:port[/db], "
			"rediss://[user:password@]host:port[/db] (TLS)"
			" or unix:///path/to/redis.sock",
			shown);
	/* The library's own parser: what loads here is what serve (and
	 * check-config) will connect with. */
	if (sluice_redis_url_check(url, why, sizeof(why)) < 0)
		return sluice_yaml_error(y, node, "store.redis.url: %s", why);
	if (sentinel && strncmp(url, "unix://", 7) == 0)
		return sluice_yaml_error(
			y, node,
			"store.redis.url \"%.100s\" is a unix socket, "
			"but the Sentinels name the master; expected "
			"redis:// or rediss:// with the master's "
			"credentials and db, or no url",
			shown);
	if (strncmp(url, "rediss://", 9) == 0)
		st->tls.enabled = 1;
	return set_string(&st->url, url) < 0 ? sluice_yaml_nomem(y, node) : 0;
}

/* Cluster seeds: "host:port", "redis://host:port" or "rediss://host:port";
 * one rediss:// seed means TLS towards every node of the cluster (the
 * nodes it names are reached the same way). */
static int parse_seeds(sluice_yaml_t *y, yaml_node_t *node,
		       sluice_store_config_t *st)
{
	size_t i, n;

	if (sluice_yaml_expect_seq(y, node, "store.redis_cluster.seeds") < 0)
		return -1;
	n = sluice_yaml_seq_len(node);
	if (n == 0)
		return sluice_yaml_error(y, node,
					 "store.redis_cluster.seeds is empty; "
					 "expected at least one \"host:port\"");
	st->seeds = calloc(n, sizeof(*st->seeds));
	if (!st->seeds)
		return sluice_yaml_nomem(y, node);
	for (i = 0; i < n; i++) {
		yaml_node_t *it = sluice_yaml_seq_at(y, node, i);
		const char *s, *hp;

		if (sluice_yaml_string(y, it, "store.redis_cluster.seeds[]",
				       &s) < 0)
			return -1;
		hp = s;
		if (strncmp(s, "redis://", 8) == 0) {
			hp = s + 8;
		} else if (strncmp(s, "rediss://", 9) == 0) {
			hp = s + 9;
			st->tls.enabled = 1;
		}
		if (!is_host_port(hp) ||
		    sluice_redis_url_check(s, NULL, 0) < 0) {
			char shown[160];

			return sluice_yaml_error(
				y, it,
				"cluster seed \"%.100s\" is not "
				"host:port; expected \"host:port\", "
				"\"redis://host:port\" or "
				"\"rediss://host:port\", e.g. "
				"\"10.0.0.1:7000\"",
				sluice_redis_url_mask(s, shown, sizeof(shown)));
		}
		st->seeds[i] = strdup(s);
		if (!st->seeds[i])
			return sluice_yaml_nomem(y, it);
		st->nseeds = i + 1;
	}
	return 0;
}

/* ----------------------------------------------------------------- TLS */

/*
 * A file named under tls: must be a regular file readable now (one byte is
 * read): a wrong path is a config error at load and at SIGHUP, named by its
 * line, rather than a handshake that fails on every connection once
 * running.  Opened without blocking and refused unless regular, so a FIFO
 * named by mistake cannot stall a reload.
 */
static int parse_tls_file(sluice_yaml_t *y, yaml_node_t *node, const char *what,
			  char **dst)
{
	const char *path;
	char why[256];
	sluice_file_t f;
	ssize_t n;
	char c;

	if (sluice_yaml_string(y, node, what, &path) < 0)
		return -1;
	if (!path[0])
		return sluice_yaml_error(y, node,
					 "%s is empty; expected the path of a "
					 "PEM file",
					 what);
	if (sluice_file_open(&f, AT_FDCWD, path, SLUICE_FILE_OWNED, (gid_t)-1,
			     why, sizeof(why)) < 0)
		return sluice_yaml_error(y, node,
					 "%s \"%.200s\" %s; expected a "
					 "readable PEM file owned by the user "
					 "sluice runs as or root",
					 what, path, why);
	n = read(f.fd, &c, 1);
	if (n < 0)
		snprintf(why, sizeof(why), "cannot be read: %s",
			 strerror(errno));
	close(f.fd);
	if (n <= 0)
		return sluice_yaml_error(y, node,
					 "%s \"%.200s\" %s; expected a "
					 "readable PEM file",
					 what, path, n ? why : "is empty");
	return set_string(dst, path) < 0 ? sluice_yaml_nomem(y, node) : 0;
}

/* "WHAT.NAME" for messages (cut short if it must be). */
static const char *field_name(char *buf, size_t len, const char *what,
			      const char *name)
{
	return snprintf(buf, len, "%s.%s", what, name) < 0 ? what : buf;
}

/* tls: {ca_file, cert_file, key_file, server_name, verify}; its presence
 * alone (even "tls: {}") turns TLS on.  Reads on after an error. */
static int parse_tls(sluice_yaml_t *y, yaml_node_t *node, const char *what,
		     sluice_store_tls_t *tls)
{
	static const char *const keys[] = {"ca_file",  "cert_file",
					   "key_file", "server_name",
					   "verify",   NULL};
	char field[96];
	yaml_node_t *v, *cert, *key;
	const char *s;
	int rc = 0;

#define FIELD(name) field_name(field, sizeof(field), what, name)
	tls->enabled = 1;
	if (sluice_yaml_is_null(node))
		return 0; /* "tls:" alone: the defaults */
	if (node->type != YAML_MAPPING_NODE)
		return sluice_yaml_error(y, node,
					 "%s is %s; expected a mapping such "
					 "as {ca_file: /etc/ssl/redis-ca.pem} "
					 "or {} for the defaults",
					 what, sluice_yaml_kind(node));
	if (sluice_yaml_check_keys(y, node, what, keys) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "ca_file")) &&
	    parse_tls_file(y, v, FIELD("ca_file"), &tls->ca_file) < 0)
		rc = -1;
	if ((cert = sluice_yaml_get(y, node, "cert_file")) &&
	    parse_tls_file(y, cert, FIELD("cert_file"), &tls->cert_file) < 0)
		rc = -1;
	if ((key = sluice_yaml_get(y, node, "key_file")) &&
	    parse_tls_file(y, key, FIELD("key_file"), &tls->key_file) < 0)
		rc = -1;
	/* A client certificate is its certificate and its key: one without
	 * the other is a half-done mutual TLS setup. */
	if (key && !cert)
		rc = sluice_yaml_error(y, key,
				       "%s.key_file is given without "
				       "cert_file; expected both (mutual "
				       "TLS) or neither",
				       what);
	if (cert && !key)
		rc = sluice_yaml_error(y, cert,
				       "%s.cert_file is given without "
				       "key_file; expected both (mutual "
				       "TLS) or neither",
				       what);
	if ((v = sluice_yaml_get(y, node, "server_name"))) {
		if (sluice_yaml_string(y, v, FIELD("server_name"), &s) < 0)
			rc = -1;
		else if (!s[0] || strlen(s) > 253 || strpbrk(s, " \t/:@"))
			rc = sluice_yaml_error(
				y, v,
				"%s.server_name \"%.100s\" is not a host "
				"name; expected the name the server's "
				"certificate holds, e.g. redis.example.com",
				what, s);
		else if (set_string(&tls->server_name, s) < 0)
			return sluice_yaml_nomem(y, v);
	}
	if ((v = sluice_yaml_get(y, node, "verify")) &&
	    sluice_yaml_bool(y, v, FIELD("verify"), &tls->verify) < 0)
		rc = -1;
	return rc;
#undef FIELD
}

/* ------------------------------------------------------------ Sentinel */

/* An optional non-empty string under sentinel: (user, password). */
static int parse_sentinel_string(sluice_yaml_t *y, yaml_node_t *node,
				 const char *what, char **dst)
{
	const char *s;

	if (sluice_yaml_string(y, node, what, &s) < 0)
		return -1;
	if (!s[0])
		return sluice_yaml_error(y, node,
					 "%s is empty; expected a value, or "
					 "no such key",
					 what);
	return set_string(dst, s) < 0 ? sluice_yaml_nomem(y, node) : 0;
}

/* sentinel: {master, addrs, user, password, tls}.  *tls_given says
 * whether tls was set (else it follows the master's TLS, decided once
 * url and tls are read).  Reads on after an error. */
static int parse_sentinel(sluice_yaml_t *y, yaml_node_t *node,
			  sluice_store_sentinel_t *sen, int *tls_given)
{
	static const char *const keys[] = {"master",   "addrs", "user",
					   "password", "tls",	NULL};
	yaml_node_t *v, *user;
	const char *s;
	size_t i, n;
	int rc = 0;

	*tls_given = 0;
	if (node->type != YAML_MAPPING_NODE)
		return sluice_yaml_error(y, node,
					 "store.redis.sentinel is %s; expected "
					 "{master: NAME, addrs: "
					 "[\"host:port\", ...]}",
					 sluice_yaml_kind(node));
	if (sluice_yaml_check_keys(y, node, "store.redis.sentinel", keys) < 0)
		rc = -1;
	if (!(v = sluice_yaml_get(y, node, "master")))
		rc = sluice_yaml_error(y, node,
				       "store.redis.sentinel has no master; "
				       "expected master: NAME (the name the "
				       "Sentinels monitor, e.g. mymaster)");
	else if (sluice_yaml_string(y, v, "store.redis.sentinel.master", &s) <
		 0)
		rc = -1;
	else if (!s[0] || strpbrk(s, " \t\r\n"))
		rc = sluice_yaml_error(y, v,
				       "store.redis.sentinel.master \"%.100s\" "
				       "is not a master name; expected the "
				       "name the Sentinels monitor, e.g. "
				       "mymaster",
				       s);
	else if (set_string(&sen->master, s) < 0)
		return sluice_yaml_nomem(y, v);
	if (!(v = sluice_yaml_get(y, node, "addrs"))) {
		rc = sluice_yaml_error(y, node,
				       "store.redis.sentinel has no addrs; "
				       "expected addrs: [\"host:port\", ...] "
				       "(the Sentinels)");
	} else if (sluice_yaml_expect_seq(y, v, "store.redis.sentinel.addrs") <
		   0) {
		rc = -1;
	} else if ((n = sluice_yaml_seq_len(v)) == 0) {
		rc = sluice_yaml_error(y, v,
				       "store.redis.sentinel.addrs is empty; "
				       "expected at least one \"host:port\"");
	} else if (!(sen->addrs = calloc(n, sizeof(*sen->addrs)))) {
		return sluice_yaml_nomem(y, v);
	} else {
		for (i = 0; i < n; i++) {
			yaml_node_t *it = sluice_yaml_seq_at(y, v, i);

			if (sluice_yaml_string(y, it,
					       "store.redis.sentinel.addrs[]",
					       &s) < 0) {
				rc = -1;
				continue;
			}
			if (!is_host_port(s)) {
				rc = sluice_yaml_error(
					y, it,
					"sentinel address \"%.100s\" is not "
					"host:port; expected \"host:port\", "
					"e.g. \"10.0.0.1:26379\" (tls: true "
					"for TLS to the Sentinels)",
					s);
				continue;
			}
			if (!(sen->addrs[sen->naddrs] = strdup(s)))
				return sluice_yaml_nomem(y, it);
			sen->naddrs++;
		}
	}
	if ((user = sluice_yaml_get(y, node, "user")) &&
	    parse_sentinel_string(y, user, "store.redis.sentinel.user",
				  &sen->user) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "password")) &&
	    parse_sentinel_string(y, v, "store.redis.sentinel.password",
				  &sen->password) < 0)
		rc = -1;
	if (user && !v)
		rc = sluice_yaml_error(y, user,
				       "store.redis.sentinel.user is given "
				       "without password; expected both, or "
				       "password alone");
	if ((v = sluice_yaml_get(y, node, "tls"))) {
		if (sluice_yaml_bool(y, v, "store.redis.sentinel.tls",
				     &sen->tls) < 0)
			rc = -1;
		else
			*tls_given = 1;
	}
	return rc;
}

/* shared: {path, max_keys}: an absolute path (the file every process of
 * the host opens; /dev/shm/NAME or another tmpfs). */
static int parse_shm_path(sluice_yaml_t *y, yaml_node_t *node,
			  sluice_store_config_t *st)
{
	const char *path;

	if (sluice_yaml_string(y, node, "store.shared.path", &path) < 0)
		return -1;
	if (path[0] != '/' || strlen(path) > 4000)
		return sluice_yaml_error(y, node,
					 "store.shared.path \"%.100s\" is not "
					 "an absolute path; expected e.g. "
					 "/dev/shm/sluice",
					 path);
	if (set_string(&st->shm_path, path) < 0)
		return sluice_yaml_nomem(y, node);
	return 0;
}

/* memory: {max_keys}, shared: {path, max_keys}, redis: {url, ...},
 * redis_cluster: {seeds, ...} */
static int parse_store_body(sluice_yaml_t *y, yaml_node_t *body,
			    const char *kind, sluice_store_config_t *st)
{
	static const char *const mem_keys[] = {"max_keys", NULL};
	static const char *const shared_keys[] = {"path", "max_keys", "group",
						  NULL};
	static const char *const redis_keys[] = {
		"url",	    "key_prefix", "timeout_ms", "connections",
		"max_keys", "tls",	  "sentinel",	NULL};
	static const char *const cluster_keys[] = {
		"seeds",    "key_prefix", "timeout_ms", "connections",
		"max_keys", "tls",	  NULL};
	char what[64], field[96];
	yaml_node_t *v, *sentinel;
	uint64_t u;
	const char *s;
	int sentinel_tls_given = 0, rc = 0;

	snprintf(what, sizeof(what), "store.%s", kind);
#define FIELD(name) (snprintf(field, sizeof(field), "%s.%s", what, name), field)
	if (sluice_yaml_is_null(body) && strcmp(kind, "redis_cluster") != 0 &&
	    strcmp(kind, "shared") != 0)
		return 0; /* "memory:" or "redis:" alone: all defaults */
	if (sluice_yaml_expect_map(y, body, what) < 0)
		return -1;
	if (sluice_yaml_check_keys(
		    y, body, what,
		    st->kind == SLUICE_STORE_MEMORY   ? mem_keys
		    : st->kind == SLUICE_STORE_SHARED ? shared_keys
		    : st->kind == SLUICE_STORE_REDIS  ? redis_keys
						      : cluster_keys) < 0)
		return -1;
	if (st->kind == SLUICE_STORE_SHARED) {
		if (!(v = sluice_yaml_get(y, body, "path")))
			return sluice_yaml_error(
				y, body,
				"store.shared has no path; expected "
				"path: /dev/shm/NAME (a file on a tmpfs)");
		if (parse_shm_path(y, v, st) < 0)
			return -1;
		/* group: the group whose members' processes share the file
		 * (resolved when the store opens). */
		if ((v = sluice_yaml_get(y, body, "group"))) {
			if (sluice_yaml_string(y, v, "store.shared.group", &s) <
			    0)
				return -1;
			if (!*s || strlen(s) > 64)
				return sluice_yaml_error(
					y, v,
					"store.shared.group is %zu bytes; "
					"expected a group name or number, "
					"e.g. sluice",
					strlen(s));
			if (set_string(&st->shm_group, s) < 0)
				return sluice_yaml_nomem(y, v);
		}
	}
	if ((v = sluice_yaml_get(y, body, "max_keys"))) {
		if (sluice_yaml_uint(y, v, FIELD("max_keys"), 1,
				     UINT64_C(1) << 32, &u) < 0)
			return -1;
		st->max_keys = (size_t)u;
	}
	sentinel = sluice_yaml_get(y, body, "sentinel");
	if ((v = sluice_yaml_get(y, body, "url")) &&
	    parse_redis_url(y, v, st, sentinel != NULL) < 0)
		return -1;
	if ((v = sluice_yaml_get(y, body, "seeds")) &&
	    parse_seeds(y, v, st) < 0)
		return -1;
	if (st->kind == SLUICE_STORE_REDIS_CLUSTER && st->nseeds == 0)
		return sluice_yaml_error(
			y, body,
			"store.redis_cluster has no seeds; "
			"expected seeds: [\"host:port\", ...]");
	/* tls: and sentinel: are both read (and all their errors said)
	 * before giving up on the store. */
	if ((v = sluice_yaml_get(y, body, "tls")) &&
	    parse_tls(y, v, FIELD("tls"), &st->tls) < 0)
		rc = -1;
	if (sentinel &&
	    parse_sentinel(y, sentinel, &st->sentinel, &sentinel_tls_given) < 0)
		rc = -1;
	if (rc < 0)
		return -1;
	/* The Sentinels of a TLS deployment usually speak TLS too. */
	if (st->sentinel.master && !sentinel_tls_given)
		st->sentinel.tls = st->tls.enabled;
	if ((v = sluice_yaml_get(y, body, "key_prefix"))) {
		if (sluice_yaml_string(y, v, FIELD("key_prefix"), &s) < 0)
			return -1;
		if (strlen(s) > 64)
			return sluice_yaml_error(
				y, v,
				"key_prefix is %zu bytes long; "
				"expected at most 64",
				strlen(s));
		if (set_string(&st->key_prefix, s) < 0)
			return sluice_yaml_nomem(y, v);
	}
	if ((v = sluice_yaml_get(y, body, "timeout_ms"))) {
		if (sluice_yaml_uint(y, v, FIELD("timeout_ms"), 1, 60000, &u) <
		    0)
			return -1;
		st->timeout_ms = (unsigned)u;
	}
	if ((v = sluice_yaml_get(y, body, "connections"))) {
		if (sluice_yaml_uint(y, v, FIELD("connections"), 1, 64, &u) < 0)
			return -1;
		st->connections = (unsigned)u;
	}
	return 0;
#undef FIELD
}

static int parse_store(sluice_yaml_t *y, yaml_node_t *node,
		       sluice_store_config_t *st)
{
	static const char *const kinds[] = {"memory", "shared", "redis",
					    "redis_cluster", NULL};
	yaml_node_t *k;
	const char *kind;

	if (node->type == YAML_SCALAR_NODE && !sluice_yaml_is_null(node)) {
		kind = (const char *)node->data.scalar.value;
		if (strcmp(kind, "memory") == 0)
			return 0;
		if (strcmp(kind, "redis") == 0) {
			st->kind = SLUICE_STORE_REDIS;
			return 0;
		}
		return sluice_yaml_error(
			y, node,
			"store \"%.60s\" is unknown; expected "
			"memory, redis, {memory: {max_keys: "
			"N}}, {shared: {path: /dev/shm/NAME}}, "
			"{redis: {url: ...}} or "
			"{redis_cluster: {seeds: [...]}}",
			kind);
	}
	if (node->type != YAML_MAPPING_NODE)
		return sluice_yaml_error(y, node,
					 "store is %s; expected memory or a "
					 "mapping such as {redis: {url: "
					 "\"redis://127.0.0.1:6379\"}}",
					 sluice_yaml_kind(node));
	if (sluice_yaml_check_keys(y, node, "store", kinds) < 0)
		return -1;
	if (node->data.mapping.pairs.top - node->data.mapping.pairs.start != 1)
		return sluice_yaml_error(
			y, node,
			"store names %s kinds; expected "
			"exactly one of memory, shared, redis, "
			"redis_cluster",
			node->data.mapping.pairs.top ==
					node->data.mapping.pairs.start
				? "no"
				: "several");
	k = sluice_yaml_node(y, node->data.mapping.pairs.start->key);
	kind = (const char *)k->data.scalar.value;
	if (strcmp(kind, "redis") == 0)
		st->kind = SLUICE_STORE_REDIS;
	else if (strcmp(kind, "redis_cluster") == 0)
		st->kind = SLUICE_STORE_REDIS_CLUSTER;
	else if (strcmp(kind, "shared") == 0)
		st->kind = SLUICE_STORE_SHARED;
	return parse_store_body(
		y, sluice_yaml_node(y, node->data.mapping.pairs.start->value),
		kind, st);
}

/* --------------------------------------------------------- trusted IPs */

/* "10.0.0.0/8", "::1/128", "192.0.2.7" (a single address). */
static int parse_cidr(sluice_yaml_t *y, yaml_node_t *node, sluice_cidr_t *c)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0,    0,
					   0, 0, 0, 0, 0xff, 0xff};
	char buf[INET6_ADDRSTRLEN + 8], *slash;
	const char *s;
	unsigned long prefix;
	unsigned i, max;

	if (sluice_yaml_string(y, node, "trusted_proxies[]", &s) < 0)
		return -1;
	if (strlen(s) >= sizeof(buf))
		goto bad;
	strcpy(buf, s);
	slash = strchr(buf, '/');
	if (slash)
		*slash = '\0';
	memset(c, 0, sizeof(*c));
	if (inet_pton(AF_INET, buf, c->addr) == 1)
		c->family = AF_INET;
	else if (inet_pton(AF_INET6, buf, c->addr) == 1)
		c->family = AF_INET6;
	else
		goto bad;
	max = c->family == AF_INET ? 32 : 128;
	prefix = max;
	if (slash) {
		char *end;

		if (!slash[1] ||
		    strspn(slash + 1, "0123456789") != strlen(slash + 1))
			goto bad;
		errno = 0;
		prefix = strtoul(slash + 1, &end, 10);
		if (errno || prefix > max)
			return sluice_yaml_error(y, node,
						 "trusted proxy \"%s\": prefix "
						 "/%s is too long; expected /0 "
						 "to /%u",
						 s, slash + 1, max);
	}
	c->prefix = (unsigned)prefix;
	for (i = 0; i < max / 8; i++) {
		unsigned keep = c->prefix > 8 * i ? c->prefix - 8 * i : 0;
		uint8_t mask = keep >= 8 ? 0xff : (uint8_t)(0xff00 >> keep);

		if (c->addr[i] & ~mask) {
			char net[INET6_ADDRSTRLEN];

			for (; i < max / 8; i++) {
				keep = c->prefix > 8 * i ? c->prefix - 8 * i
							 : 0;
				c->addr[i] &=
					keep >= 8 ? 0xff
						  : (uint8_t)(0xff00 >> keep);
			}
			inet_ntop(c->family, c->addr, net, sizeof(net));
			return sluice_yaml_error(
				y, node,
				"trusted proxy \"%s\" has host bits set; "
				"expected the network address, e.g. %s/%u",
				s, net, c->prefix);
		}
	}
	/* ::ffff:a.b.c.d/N is the IPv4 block a.b.c.d/(N-96): peers are
	 * compared as IPv4 once unmapped. */
	if (c->family == AF_INET6 && c->prefix >= 96 &&
	    memcmp(c->addr, mapped, 12) == 0) {
		memmove(c->addr, c->addr + 12, 4);
		memset(c->addr + 4, 0, 12);
		c->family = AF_INET;
		c->prefix -= 96;
	}
	return 0;
bad:
	return sluice_yaml_error(y, node,
				 "trusted proxy \"%.80s\" is not an address "
				 "or CIDR block; expected e.g. 10.0.0.0/8, "
				 "127.0.0.1 or \"::1/128\"",
				 s);
}

static int parse_trusted(sluice_yaml_t *y, yaml_node_t *node,
			 sluice_config_t *cfg)
{
	size_t i, n;
	int rc = 0;

	if (sluice_yaml_is_null(node))
		n = 0;
	else if (sluice_yaml_expect_seq(y, node, "trusted_proxies") < 0)
		return -1;
	else
		n = sluice_yaml_seq_len(node);
	free(cfg->trusted_proxies);
	cfg->trusted_proxies = NULL;
	cfg->ntrusted = 0;
	if (n == 0)
		return 0; /* trust nobody: the TCP peer is the client */
	cfg->trusted_proxies = calloc(n, sizeof(*cfg->trusted_proxies));
	if (!cfg->trusted_proxies)
		return sluice_yaml_nomem(y, node);
	for (i = 0; i < n; i++)
		if (parse_cidr(y, sluice_yaml_seq_at(y, node, i),
			       &cfg->trusted_proxies[i]) < 0)
			rc = -1;
	cfg->ntrusted = n;
	return rc;
}

/* ---------------------------------------------------------------- http */

static int parse_http(sluice_yaml_t *y, yaml_node_t *node, sluice_config_t *cfg)
{
	static const char *const keys[] = {"max_header_bytes", "max_body_bytes",
					   "idle_timeout_ms", NULL};
	yaml_node_t *v;
	uint64_t u;

	int rc = 0;

	if (sluice_yaml_expect_map(y, node, "http") < 0)
		return -1;
	if (sluice_yaml_check_keys(y, node, "http", keys) < 0)
		rc = -1;
	/* http-parser refuses a head over 80 KiB (counting the CRLFs and
	 * spaces we do not store) whatever this says: above 64 KiB the
	 * setting would not be what applies. */
	if ((v = sluice_yaml_get(y, node, "max_header_bytes"))) {
		if (sluice_yaml_uint(y, v, "http.max_header_bytes", 1024,
				     SLUICE_MAX_HEADER_BYTES_CAP, &u) < 0)
			rc = -1;
		else
			cfg->max_header_bytes = (size_t)u;
	}
	/* A body is parsed (JSON) in one go on the event loop, stalling
	 * every other connection of the thread: 64 KiB of the worst JSON
	 * takes ~20 ms, 1 MiB ~300 ms.  A /v1/take body needs ~1 KiB. */
	if ((v = sluice_yaml_get(y, node, "max_body_bytes"))) {
		if (sluice_yaml_uint(y, v, "http.max_body_bytes", 64,
				     SLUICE_MAX_BODY_BYTES_CAP, &u) < 0)
			rc = -1;
		else
			cfg->max_body_bytes = (size_t)u;
	}
	if ((v = sluice_yaml_get(y, node, "idle_timeout_ms"))) {
		if (sluice_yaml_uint(y, v, "http.idle_timeout_ms", 100,
				     3600 * 1000, &u) < 0)
			rc = -1;
		else
			cfg->idle_timeout_ms = (unsigned)u;
	}
	return rc;
}

/* ------------------------------------------------------------ the file */

/* Each setting is read even after another failed, so that check-config
 * reports every error at once; rc says whether any did. */
static int parse_root(sluice_yaml_t *y, yaml_node_t *root, sluice_config_t *cfg)
{
	static const char *const keys[] = {
		"listen",      "threads", "store", "trusted_proxies",
		"ipv6_prefix", "http",	  "admin", "proxy",
		"rules",       "envoy",	  "grpc",  NULL};
	yaml_node_t *v;
	uint64_t u;
	const char *s;
	char msg[256];
	struct sockaddr_storage ss;
	int rc = 0;

	if (sluice_yaml_check_keys(y, root, "top level", keys) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, root, "listen"))) {
		if (sluice_yaml_string(y, v, "listen", &s) < 0)
			rc = -1;
		else if (sluice_listen_parse(s, &ss, msg, sizeof(msg)) < 0)
			rc = sluice_yaml_error(y, v, "%s", msg);
		else if (set_string(&cfg->listen, s) < 0)
			return sluice_yaml_nomem(y, v);
	}
	if ((v = sluice_yaml_get(y, root, "threads"))) {
		if (sluice_yaml_uint(y, v, "threads", 1, SLUICE_MAX_THREADS,
				     &u) < 0)
			rc = -1;
		else
			cfg->threads = (unsigned)u;
	}
	if ((v = sluice_yaml_get(y, root, "store")) &&
	    parse_store(y, v, &cfg->store) < 0)
		rc = -1;
	/* With a Sentinel the URL only gives credentials: none is none. */
	if (cfg->store.kind == SLUICE_STORE_REDIS && !cfg->store.url &&
	    !cfg->store.sentinel.master &&
	    set_string(&cfg->store.url, "redis://127.0.0.1:6379") < 0)
		return sluice_yaml_nomem(y, v);
	if ((v = sluice_yaml_get(y, root, "trusted_proxies")) &&
	    parse_trusted(y, v, cfg) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, root, "ipv6_prefix"))) {
		if (sluice_yaml_uint(y, v, "ipv6_prefix", 1, 128, &u) < 0)
			rc = -1;
		else
			cfg->ipv6_prefix = (unsigned)u;
	}
	if ((v = sluice_yaml_get(y, root, "http")) && parse_http(y, v, cfg) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, root, "admin")) &&
	    sluice_config_parse_admin(y, v, cfg) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, root, "proxy")) &&
	    sluice_config_parse_proxy(y, v, cfg) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, root, "envoy")) &&
	    sluice_envoy_parse_section(y, v, cfg->path, &cfg->envoy) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, root, "grpc")) &&
	    sluice_config_parse_grpc(y, v, cfg) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, root, "rules"))) {
		if (sluice_config_parse_rules(y, v, cfg) < 0)
			rc = -1;
	} else if (default_rule(cfg) < 0) {
		return sluice_yaml_nomem(y, root);
	}
	return rc;
}

/* Parses text into a config, recording errors in y (whose name, err and
 * report the caller set).  Returns NULL after any error. */
static sluice_config_t *parse_text(sluice_yaml_t *y, const char *text,
				   size_t len)
{
	sluice_config_t *cfg;
	char line[1024];
	int rc;

	if (y->errlen)
		y->err[0] = '\0';
	cfg = sluice_config_default();
	if (!cfg) {
		snprintf(line, sizeof(line), "%s:1: out of memory", y->name);
		sluice_yaml_report(y, line);
		return NULL;
	}
	/* Start from the defaults minus the classic rule, which applies only
	 * when the file has no rules of its own. */
	free_rules(cfg);
	cfg->path = strdup(y->name);
	if (!cfg->path) {
		snprintf(line, sizeof(line), "%s:1: out of memory", y->name);
		sluice_yaml_report(y, line);
		sluice_config_free(cfg);
		return NULL;
	}
	if (sluice_yaml_load(y, text, len) < 0) {
		/* The loader writes its one message into y->err. */
		snprintf(line, sizeof(line), "%s", y->err);
		y->nerrors = 0;
		sluice_yaml_report(y, line);
		sluice_config_free(cfg);
		return NULL;
	}
	rc = parse_root(y, sluice_yaml_root(y), cfg);
	sluice_yaml_free(y);
	if (rc < 0 || y->nerrors) {
		sluice_config_free(cfg);
		return NULL;
	}
	return cfg;
}

/* A file's text; withheld: messages quote none of it (see
 * sluice_file_t.quotable). */
static sluice_config_t *parse_file(const char *name, const char *text,
				   size_t len, int quotable, char *err,
				   size_t errlen)
{
	char dummy[1];
	sluice_yaml_t y = {.name = name ? name : "<config>",
			   .err = err ? err : dummy,
			   .errlen = err ? errlen : sizeof(dummy),
			   .withhold = !quotable};

	return parse_text(&y, text, len);
}

sluice_config_t *sluice_config_parse(const char *name, const char *text,
				     size_t len, char *err, size_t errlen)
{
	return parse_file(name, text, len, 1, err, errlen);
}

/* Reads a whole config or overrides file (at most SLUICE_CONFIG_MAX_BYTES)
 * into *out, NUL terminated, through sluice_file_read(): a regular file,
 * owned by the user sluice runs as or root, opened without blocking (a
 * FIFO is refused, not waited on).  *quotable (may be NULL) says whether
 * messages may quote its content.  Returns 0, or -1 with "FILE:1: ..." in
 * err. */
int sluice_config_read_file(const char *path, char **out, size_t *outlen,
			    int *quotable, char *err, size_t errlen)
{
	char why[256];

	if (sluice_file_read(path, SLUICE_CONFIG_MAX_BYTES, SLUICE_FILE_OWNED,
			     out, outlen, quotable, why, sizeof(why)) == 0)
		return 0;
	snprintf(err, errlen,
		 "%s:1: %s; expected a regular YAML file (at most %d MiB) "
		 "owned by the user sluice runs as or root",
		 path, why, SLUICE_CONFIG_MAX_BYTES >> 20);
	return -1;
}

sluice_config_t *sluice_config_load(const char *path, char *err, size_t errlen)
{
	sluice_config_t *cfg;
	char *buf;
	size_t len;
	int quotable;

	if (sluice_config_read_file(path, &buf, &len, &quotable, err, errlen) <
	    0)
		return NULL;
	cfg = parse_file(path, buf, len, quotable, err, errlen);
	free(buf);
	return cfg;
}

unsigned sluice_config_check(const char *path, char *report, size_t len,
			     unsigned max_errors)
{
	char first[1024], line[1024];
	sluice_yaml_t y = {.name = path,
			   .err = first,
			   .errlen = sizeof(first),
			   .report = report,
			   .reportlen = len,
			   .max_errors = max_errors};
	sluice_config_t *cfg;
	char *buf;
	size_t n;
	int quotable;

	if (len)
		report[0] = '\0';
	if (sluice_config_read_file(path, &buf, &n, &quotable, line,
				    sizeof(line)) < 0) {
		sluice_yaml_report(&y, line);
		return y.nerrors;
	}
	y.withhold = !quotable;
	cfg = parse_text(&y, buf, n);
	free(buf);
	sluice_config_free(cfg);
	return y.nerrors;
}
