/*
 * config.c -- the configuration: its defaults, its lifetime, reading the
 * file and its top-level settings (listen, threads, trusted proxies, http
 * limits).  The store section is read by store.c, rules by
 * rule.c (their limits by limits.c); what a reload cannot
 * apply is reload.c's; the YAML walking, file reading and string
 * helpers live in yaml.c.  docs/CONFIG.md documents every
 * field; keep it in step.
 */
#include "policy/config/internal.h"

#include "policy/envoy/config.h"
#include "policy/envoy/import.h"

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
	cfg->threads = SLUICE_DEFAULT_THREADS;
	cfg->store.kind = SLUICE_STORE_MEMORY;
	cfg->store.max_keys = SLUICE_DEFAULT_MAX_KEYS;
	cfg->store.timeout_ms = SLUICE_DEFAULT_STORE_TIMEOUT_MS;
	cfg->store.connections = SLUICE_DEFAULT_CONNECTIONS;
	cfg->store.tls.verify = 1;
	cfg->ipv6_prefix = SLUICE_DEFAULT_IPV6_PREFIX;
	cfg->max_header_bytes = SLUICE_DEFAULT_MAX_HEADER_BYTES;
	cfg->max_body_bytes = SLUICE_DEFAULT_MAX_BODY_BYTES;
	cfg->idle_timeout_ms = SLUICE_DEFAULT_IDLE_TIMEOUT_MS;
	cfg->log_level = SLUICE_DEFAULT_LOG_LEVEL;
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
	cfg->listen = strdup(SLUICE_DEFAULT_LISTEN);
	cfg->store.key_prefix = strdup(SLUICE_DEFAULT_KEY_PREFIX);
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
	free(r->limits.carry);
	for (i = 0; i < r->ntiers; i++) {
		free(r->tiers[i].name);
		free(r->tiers[i].carry);
	}
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
	if (!cfg)
		return;
	free(cfg->path);
	free(cfg->listen);
	sluice_config_free_store(&cfg->store);
	free(cfg->trusted_proxies);
	free(cfg->admin_token);
	free(cfg->admin_listen);
	free(cfg->grpc.listen);
	sluice_tls_server_config_free(&cfg->grpc.tls);
	sluice_tls_server_config_free(&cfg->http_tls);
	sluice_tls_server_config_free(&cfg->admin_tls);
	sluice_envoy_config_free(cfg->envoy);
	free_rules(cfg);
	free(cfg);
}

/* --------------------------------------------------------- trusted IPs */

/* The mask of byte i of an address under a /prefix. */
static uint8_t prefix_mask(unsigned prefix, unsigned i)
{
	unsigned keep = prefix > 8 * i ? prefix - 8 * i : 0;

	return keep >= 8 ? 0xff : (uint8_t)(0xff00 >> keep);
}

/* A block's address is its network's: no bit set past the prefix (the
 * message shows the network address meant). */
static int check_host_bits(sluice_yaml_t *y, yaml_node_t *node, const char *s,
			   sluice_cidr_t *c)
{
	unsigned i, j, max = c->family == AF_INET ? 32 : 128;
	char net[INET6_ADDRSTRLEN];

	for (i = 0; i < max / 8; i++)
		if (c->addr[i] & ~prefix_mask(c->prefix, i))
			break;
	if (i == max / 8)
		return 0;
	for (j = i; j < max / 8; j++)
		c->addr[j] &= prefix_mask(c->prefix, j);
	inet_ntop(c->family, c->addr, net, sizeof(net));
	return sluice_yaml_error(y, node,
				 "trusted proxy \"%s\" has host bits set; "
				 "expected the network address, e.g. %s/%u",
				 s, net, c->prefix);
}

/* "10.0.0.0/8", "::1/128", "192.0.2.7" (a single address). */
static int parse_cidr(sluice_yaml_t *y, yaml_node_t *node, sluice_cidr_t *c)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0,    0,
					   0, 0, 0, 0, 0xff, 0xff};
	char buf[INET6_ADDRSTRLEN + 8], *slash;
	const char *s;
	unsigned long prefix;
	unsigned max;

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
	if (check_host_bits(y, node, s, c) < 0)
		return -1;
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
	static const char *const keys[] = {"max_header_bytes",
					   "max_body_bytes",
					   "idle_timeout_ms",
					   "max_connection_age_ms",
					   "tls",
					   NULL};
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
	/* Read at each accept: a reload applies it to new connections. */
	if ((v = sluice_yaml_get(y, node, "max_connection_age_ms"))) {
		if (sluice_yaml_uint(y, v, "http.max_connection_age_ms", 0,
				     UINT32_MAX, &u) < 0)
			rc = -1;
		else
			cfg->http_max_age_ms = u;
	}
	if ((v = sluice_yaml_get(y, node, "tls")) &&
	    sluice_config_parse_tls(y, v, "http.tls", &cfg->http_tls) < 0)
		rc = -1;
	return rc;
}

/* ------------------------------------------------------------ the file */

/* Each setting is read even after another failed, so that check-config
 * reports every error at once; rc says whether any did. */
static int parse_root(sluice_yaml_t *y, yaml_node_t *root, sluice_config_t *cfg)
{
	static const char *const keys[] = {
		"listen", "threads", "store", "trusted_proxies", "ipv6_prefix",
		"http",	  "admin",   "proxy", "rules",		 "envoy",
		"grpc",	  "log",     NULL};
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
		else if (sluice_config_set_string(&cfg->listen, s) < 0)
			return sluice_yaml_nomem(y, v);
	}
	if ((v = sluice_yaml_get(y, root, "threads"))) {
		if (sluice_yaml_uint(y, v, "threads", 1, SLUICE_MAX_THREADS,
				     &u) < 0)
			rc = -1;
		else
			cfg->threads = (unsigned)u;
	}
	if ((v = sluice_yaml_get(y, root, "store"))) {
		cfg->store_line = sluice_yaml_line(v);
		if (sluice_config_parse_store(y, v, &cfg->store) < 0)
			rc = -1;
	}
	/* With a Sentinel the URL only gives credentials: none is none. */
	if (cfg->store.kind == SLUICE_STORE_REDIS && !cfg->store.url &&
	    !cfg->store.sentinel.master &&
	    sluice_config_set_string(&cfg->store.url,
				     SLUICE_DEFAULT_REDIS_URL) < 0)
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
	    (sluice_envoy_parse_section(y, v, cfg->path, &cfg->envoy) < 0 ||
	     sluice_envoy_import_check(y, v, cfg) < 0))
		rc = -1;
	if ((v = sluice_yaml_get(y, root, "grpc")) &&
	    sluice_config_parse_grpc(y, v, cfg) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, root, "log")) &&
	    sluice_config_parse_log(y, v, cfg) < 0)
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
