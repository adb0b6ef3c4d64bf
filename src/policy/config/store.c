/*
 * store.c -- the `store:` section (memory, shared, redis with TLS
 * and Sentinel, redis_cluster) into a sluice_store_config_t
 * (store/store_config.h), and its freeing.  docs/CONFIG.md documents every
 * field; keep it in step.
 */
#include "policy/config/internal.h"
#include "sluice_redis.h"
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --------------------------------------------------------------- store */

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
	return sluice_config_set_string(&st->url, url) < 0
		       ? sluice_yaml_nomem(y, node)
		       : 0;
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
 * named by mistake cannot stall a reload.  The listeners' tls: blocks
 * (tls.c) check their files so too.
 */
int sluice_config_parse_pem_file(sluice_yaml_t *y, yaml_node_t *node,
				 const char *what, char **dst)
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
	return sluice_config_set_string(dst, path) < 0
		       ? sluice_yaml_nomem(y, node)
		       : 0;
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
	    sluice_config_parse_pem_file(y, v, FIELD("ca_file"),
					 &tls->ca_file) < 0)
		rc = -1;
	if ((cert = sluice_yaml_get(y, node, "cert_file")) &&
	    sluice_config_parse_pem_file(y, cert, FIELD("cert_file"),
					 &tls->cert_file) < 0)
		rc = -1;
	if ((key = sluice_yaml_get(y, node, "key_file")) &&
	    sluice_config_parse_pem_file(y, key, FIELD("key_file"),
					 &tls->key_file) < 0)
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
		else if (sluice_config_set_string(&tls->server_name, s) < 0)
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
	return sluice_config_set_string(dst, s) < 0 ? sluice_yaml_nomem(y, node)
						    : 0;
}

/* sentinel.master: the name the Sentinels monitor.  0, -1 (reported),
 * or SLUICE_ENOMEM (reported) when reading must stop. */
static int parse_sentinel_master(sluice_yaml_t *y, yaml_node_t *node,
				 sluice_store_sentinel_t *sen)
{
	yaml_node_t *v;
	const char *s;

	if (!(v = sluice_yaml_get(y, node, "master")))
		return sluice_yaml_error(y, node,
					 "store.redis.sentinel has no master; "
					 "expected master: NAME (the name the "
					 "Sentinels monitor, e.g. mymaster)");
	if (sluice_yaml_string(y, v, "store.redis.sentinel.master", &s) < 0)
		return -1;
	if (!s[0] || strpbrk(s, " \t\r\n"))
		return sluice_yaml_error(y, v,
					 "store.redis.sentinel.master "
					 "\"%.100s\" is not a master name; "
					 "expected the name the Sentinels "
					 "monitor, e.g. mymaster",
					 s);
	if (sluice_config_set_string(&sen->master, s) < 0) {
		sluice_yaml_nomem(y, v);
		return SLUICE_ENOMEM;
	}
	return 0;
}

/* sentinel.addrs: the Sentinels, "host:port" each; every one is checked.
 * 0, -1 (reported), or SLUICE_ENOMEM (reported) when reading must stop. */
static int parse_sentinel_addrs(sluice_yaml_t *y, yaml_node_t *node,
				sluice_store_sentinel_t *sen)
{
	yaml_node_t *v;
	const char *s;
	size_t i, n;
	int rc = 0;

	if (!(v = sluice_yaml_get(y, node, "addrs")))
		return sluice_yaml_error(y, node,
					 "store.redis.sentinel has no addrs; "
					 "expected addrs: [\"host:port\", ...] "
					 "(the Sentinels)");
	if (sluice_yaml_expect_seq(y, v, "store.redis.sentinel.addrs") < 0)
		return -1;
	if ((n = sluice_yaml_seq_len(v)) == 0)
		return sluice_yaml_error(y, v,
					 "store.redis.sentinel.addrs is empty; "
					 "expected at least one \"host:port\"");
	if (!(sen->addrs = calloc(n, sizeof(*sen->addrs)))) {
		sluice_yaml_nomem(y, v);
		return SLUICE_ENOMEM;
	}
	for (i = 0; i < n; i++) {
		yaml_node_t *it = sluice_yaml_seq_at(y, v, i);

		if (sluice_yaml_string(y, it, "store.redis.sentinel.addrs[]",
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
		if (!(sen->addrs[sen->naddrs] = strdup(s))) {
			sluice_yaml_nomem(y, it);
			return SLUICE_ENOMEM;
		}
		sen->naddrs++;
	}
	return rc;
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
	int r, rc = 0;

	*tls_given = 0;
	if (node->type != YAML_MAPPING_NODE)
		return sluice_yaml_error(y, node,
					 "store.redis.sentinel is %s; expected "
					 "{master: NAME, addrs: "
					 "[\"host:port\", ...]}",
					 sluice_yaml_kind(node));
	if (sluice_yaml_check_keys(y, node, "store.redis.sentinel", keys) < 0)
		rc = -1;
	if ((r = parse_sentinel_master(y, node, sen)) == SLUICE_ENOMEM)
		return -1;
	if (r < 0)
		rc = -1;
	if ((r = parse_sentinel_addrs(y, node, sen)) == SLUICE_ENOMEM)
		return -1;
	if (r < 0)
		rc = -1;
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
	if (sluice_config_set_string(&st->shm_path, path) < 0)
		return sluice_yaml_nomem(y, node);
	return 0;
}

/* shared: {path, group}: the file, and the group whose members'
 * processes share it (resolved when the store opens). */
static int parse_shared(sluice_yaml_t *y, yaml_node_t *body,
			sluice_store_config_t *st)
{
	yaml_node_t *v;
	const char *s;

	if (!(v = sluice_yaml_get(y, body, "path")))
		return sluice_yaml_error(y, body,
					 "store.shared has no path; expected "
					 "path: /dev/shm/NAME (a file on a "
					 "tmpfs)");
	if (parse_shm_path(y, v, st) < 0)
		return -1;
	if (!(v = sluice_yaml_get(y, body, "group")))
		return 0;
	if (sluice_yaml_string(y, v, "store.shared.group", &s) < 0)
		return -1;
	if (!*s || strlen(s) > 64)
		return sluice_yaml_error(y, v,
					 "store.shared.group is %zu bytes; "
					 "expected a group name or number, "
					 "e.g. sluice",
					 strlen(s));
	if (sluice_config_set_string(&st->shm_group, s) < 0)
		return sluice_yaml_nomem(y, v);
	return 0;
}

/* key_prefix, timeout_ms and connections of a Redis store (what: its
 * "store.KIND" for messages). */
static int parse_redis_tuning(sluice_yaml_t *y, yaml_node_t *body,
			      const char *what, sluice_store_config_t *st)
{
	char field[96];
	yaml_node_t *v;
	const char *s;
	uint64_t u;

	if ((v = sluice_yaml_get(y, body, "key_prefix"))) {
		snprintf(field, sizeof(field), "%s.key_prefix", what);
		if (sluice_yaml_string(y, v, field, &s) < 0)
			return -1;
		if (strlen(s) > 64)
			return sluice_yaml_error(y, v,
						 "key_prefix is %zu bytes "
						 "long; expected at most 64",
						 strlen(s));
		if (sluice_config_set_string(&st->key_prefix, s) < 0)
			return sluice_yaml_nomem(y, v);
	}
	if ((v = sluice_yaml_get(y, body, "timeout_ms"))) {
		snprintf(field, sizeof(field), "%s.timeout_ms", what);
		if (sluice_yaml_uint(y, v, field, 1, 60000, &u) < 0)
			return -1;
		st->timeout_ms = (unsigned)u;
	}
	if ((v = sluice_yaml_get(y, body, "connections"))) {
		snprintf(field, sizeof(field), "%s.connections", what);
		if (sluice_yaml_uint(y, v, field, 1, 64, &u) < 0)
			return -1;
		st->connections = (unsigned)u;
	}
	return 0;
}

/* memory: {max_keys}, shared: {path, max_keys}, redis: {url, ...},
 * redis_cluster: {seeds, ...} */
static int parse_store_body(sluice_yaml_t *y, yaml_node_t *body,
			    const char *kind, sluice_store_config_t *st)
{
	char what[64], field[96];
	yaml_node_t *v, *sentinel;
	uint64_t u;
	int sentinel_tls_given = 0, rc = 0;

	snprintf(what, sizeof(what), "store.%s", kind);
#define FIELD(name) (snprintf(field, sizeof(field), "%s.%s", what, name), field)
	if (sluice_yaml_is_null(body) && strcmp(kind, "redis_cluster") != 0 &&
	    strcmp(kind, "shared") != 0)
		return 0; /* "memory:" or "redis:" alone: all defaults */
	if (sluice_yaml_expect_map(y, body, what) < 0)
		return -1;
	/* Each kind's keys are store_kinds.def's. */
	if (sluice_yaml_check_keys(y, body, what,
				   sluice_store_kind_info(st->kind)->keys) < 0)
		return -1;
	if (st->kind == SLUICE_STORE_SHARED && parse_shared(y, body, st) < 0)
		return -1;
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
	return parse_redis_tuning(y, body, what, st);
#undef FIELD
}

int sluice_config_parse_store(sluice_yaml_t *y, yaml_node_t *node,
			      sluice_store_config_t *st)
{
	const sluice_store_kind_info_t *info;
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
	if (sluice_yaml_check_keys(y, node, "store",
				   sluice_store_kind_names()) < 0)
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
	/* check_keys let through only the names store_kinds.def has. */
	if (!(info = sluice_store_kind_named(kind)))
		return sluice_yaml_error(
			y, k, "store kind \"%.60s\" is unknown", kind);
	st->kind = info->kind;
	return parse_store_body(
		y, sluice_yaml_node(y, node->data.mapping.pairs.start->value),
		kind, st);
}

void sluice_config_free_store(sluice_store_config_t *st)
{
	size_t i;

	free(st->url);
	free(st->shm_path);
	free(st->shm_group);
	for (i = 0; i < st->nseeds; i++)
		free(st->seeds[i]);
	free(st->seeds);
	free(st->key_prefix);
	free(st->tls.ca_file);
	free(st->tls.cert_file);
	free(st->tls.key_file);
	free(st->tls.server_name);
	free(st->sentinel.master);
	for (i = 0; i < st->sentinel.naddrs; i++)
		free(st->sentinel.addrs[i]);
	free(st->sentinel.addrs);
	free(st->sentinel.user);
	free(st->sentinel.password);
}
