/*
 * config.h -- the `sluice serve` configuration (YAML): its settings and the
 * rules it holds (policy/rules.h).
 *
 * config/config.c parses and validates a file into a sluice_config_t
 * (with the other files of policy/config/, one a section); policy/rules.c
 * answers "which buckets does this request touch?" for the front ends.
 * The front ends never look inside YAML, and this layer never does I/O
 * beyond reading the file.
 *
 * A config is immutable once loaded: SIGHUP builds a new one and swaps the
 * pointer, so a request in flight keeps using the config it started with.
 */
#ifndef SLUICE_POLICY_CONFIG_H
#define SLUICE_POLICY_CONFIG_H

#include "policy/rules.h"
#include "sluice.h"
#include "store/store_config.h"
#include "util/defaults.h"
#include "util/listen_socket.h"
#include "util/log.h"
#include "util/tls_server.h"

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>

/* A CIDR block of trusted proxies. */
typedef struct sluice_cidr_s {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	unsigned prefix;
} sluice_cidr_t;

/* The defaults of the settings (SLUICE_DEFAULT_*) are util/defaults.h's,
 * the one place they are written.  config.c starts every config from them;
 * the accessors below read a zero field (a config built by hand) as its
 * default, so no reader keeps a fallback of its own. */
#define SLUICE_DEFAULT_LOG_LEVEL SLUICE_LOG_INFO

/* Event-loop threads: `threads` in the file and --threads accept 1 to
 * this, one range everywhere. */
#define SLUICE_MAX_THREADS 64

/* Upper ends of http.max_header_bytes and http.max_body_bytes (config.c
 * says why). */
#define SLUICE_MAX_HEADER_BYTES_CAP (64 * 1024)
#define SLUICE_MAX_BODY_BYTES_CAP   (64 * 1024)

/* The gRPC listener (src/grpc/; config/grpc.c): off unless `grpc.listen`
 * or --grpc-listen gives an address. */
typedef struct sluice_grpc_config_s {
	char *listen; /* "HOST:PORT", "[V6]:PORT" or "unix:/PATH"; NULL: off */
	size_t max_message_bytes; /* RESOURCE_EXHAUSTED beyond; 0: 64 KiB */
	/* max_connection_age_ms / _grace_ms (envoyproxy/ratelimit's
	 * GRPC_MAX_CONNECTION_AGE / _GRACE): a connection this old (give
	 * or take 10%) is told GOAWAY, so that clients spread over the
	 * replicas again; grace later it is closed.  0: never.  *_set: the
	 * config gave it (else the default). */
	uint64_t max_age_ms, max_age_grace_ms;
	int max_age_set, max_age_grace_set;
	/* grpc.tls (config/tls.c; src/grpc/tls.c over util/tls_server.c):
	 * off when cert_file is NULL. */
	sluice_tls_server_config_t tls;
} sluice_grpc_config_t;

/* Upper end of grpc.max_message_bytes. */
#define SLUICE_GRPC_MAX_MESSAGE_CAP (4 * 1024 * 1024)

typedef struct sluice_config_s {
	char *path;	  /* the file, or NULL for the built-in default */
	char *listen;	  /* "HOST:PORT", "[V6]:PORT"; default 127.0.0.1:8080 */
	unsigned threads; /* default 1 */
	sluice_store_config_t store;
	int store_line; /* where `store:` is in the file; 0: absent */
	sluice_cidr_t *trusted_proxies;
	size_t ntrusted;
	unsigned ipv6_prefix; /* default 64 */
	/* limits on what clients send (defaults in config.c) */
	size_t max_header_bytes;  /* 431 beyond */
	size_t max_body_bytes;	  /* 413 beyond */
	unsigned idle_timeout_ms; /* close idle keep-alive connections */
	/* http.tls and admin.tls (config/tls.c): HTTPS on `listen` and on
	 * admin.listen (src/serve/tcp.c); off when cert_file is NULL. */
	sluice_tls_server_config_t http_tls, admin_tls;
	/* http.max_connection_age_ms: a keep-alive connection this old
	 * (give or take 10%) gets Connection: close on its next answer;
	 * 0: never (SLUICE_DEFAULT_HTTP_MAX_AGE_MS). */
	uint64_t http_max_age_ms;
	sluice_rule_t *rules;
	size_t nrules;
	/* The bearer token of the admin endpoints; NULL: they are off. */
	char *admin_token;
	/* admin.listen: the admin endpoints' own listener ("HOST:PORT");
	 * NULL: they are served on `listen` with the rest. */
	char *admin_listen;
	/* proxy: the headers (lower-case) that give /v1/check the method
	 * and URI of the request it decides; both "" for envoy; proxy_set 0
	 * for the default, nginx's (config/proxy.c). */
	int proxy_set;
	char proxy_method[64], proxy_uri[64];
	sluice_grpc_config_t grpc;
	/* log: {format, level} (config/log.c): JSON lines or text, and
	 * the lowest level written; text and info by default. */
	int log_json;
	sluice_log_level_t log_level;
	/* The `envoy:` section and its loaded directory
	 * (policy/envoy/config.h); NULL when absent. */
	struct sluice_envoy_config_s *envoy;
} sluice_config_t;

/*
 * Loads and validates a YAML file.  On error returns NULL and writes
 * "FILE:LINE: what is wrong; what was expected" into err.
 */
sluice_config_t *sluice_config_load(const char *path, char *err, size_t errlen);

/*
 * Validates a file as sluice_config_load() would, but reads on after an
 * error: writes up to max_errors lines "FILE:LINE: ..." (each ending in
 * '\n') into report and returns how many errors it found (0: valid).
 */
unsigned sluice_config_check(const char *path, char *report, size_t len,
			     unsigned max_errors);

/* The same from a buffer; `name` stands for the file in messages. */
sluice_config_t *sluice_config_parse(const char *name, const char *text,
				     size_t len, char *err, size_t errlen);

/* The built-in default: the classic policy on the memory store (rule
 * "default": capacity 100, refill 2/s, key = x-user-id header, else the
 * client IP) with a per-address ceiling (rule "default-ip": capacity 200,
 * refill 4/s, key = the client IP). */
sluice_config_t *sluice_config_default(void);

void sluice_config_free(sluice_config_t *cfg);

/*
 * Tells each limit of cfg (a config loaded to replace `prev`, the running
 * one; NULL: none) which limits a key's bucket may have been charged
 * under instead, so that a changed limit keeps each key's usage
 * (config/carry.c says which; the verdict engine hands them to the
 * store's carry verb).  now_us is the reload's instant.  0, or
 * SLUICE_ENOMEM (cfg is then usable, carrying less).
 */
int sluice_config_carry(sluice_config_t *cfg, const sluice_config_t *prev,
			int64_t now_us);

/* The store's kind in words ("memory", "redis sentinel", ...). */
const char *sluice_config_store_name(const sluice_config_t *cfg);

/* 1 when two store settings open the same store (config/reload.c). */
int sluice_config_store_same(const sluice_store_config_t *a,
			     const sluice_store_config_t *b);

/* Says (in the log, field by field) what a reload from `run` to `cfg`
 * cannot apply (the sockets, threads and store are set up once); returns
 * the fields' names in buf for the summary line, "" when everything
 * applies (config/reload.c). */
const char *sluice_config_restart_fields(const sluice_config_t *cfg,
					 const sluice_config_t *run, char *buf,
					 size_t len);

/* http.max_header_bytes, http.max_body_bytes, http.idle_timeout_ms,
 * grpc.max_message_bytes and store.max_keys, their defaults when 0 (the
 * one place the front ends read them from). */
static inline size_t sluice_config_max_header_bytes(const sluice_config_t *cfg)
{
	return cfg->max_header_bytes ? cfg->max_header_bytes
				     : SLUICE_DEFAULT_MAX_HEADER_BYTES;
}

static inline size_t sluice_config_max_body_bytes(const sluice_config_t *cfg)
{
	return cfg->max_body_bytes ? cfg->max_body_bytes
				   : SLUICE_DEFAULT_MAX_BODY_BYTES;
}

static inline unsigned sluice_config_idle_timeout_ms(const sluice_config_t *cfg)
{
	return cfg->idle_timeout_ms ? cfg->idle_timeout_ms
				    : SLUICE_DEFAULT_IDLE_TIMEOUT_MS;
}

static inline size_t sluice_config_grpc_max_message(const sluice_config_t *cfg)
{
	return cfg->grpc.max_message_bytes ? cfg->grpc.max_message_bytes
					   : SLUICE_DEFAULT_GRPC_MAX_MESSAGE;
}

static inline uint64_t sluice_config_grpc_max_age_ms(const sluice_config_t *cfg)
{
	return cfg->grpc.max_age_set ? cfg->grpc.max_age_ms
				     : SLUICE_DEFAULT_GRPC_MAX_AGE_MS;
}

static inline uint64_t
sluice_config_grpc_max_age_grace_ms(const sluice_config_t *cfg)
{
	return cfg->grpc.max_age_grace_set
		       ? cfg->grpc.max_age_grace_ms
		       : SLUICE_DEFAULT_GRPC_MAX_AGE_GRACE_MS;
}

static inline uint64_t sluice_config_http_max_age_ms(const sluice_config_t *cfg)
{
	return cfg->http_max_age_ms ? cfg->http_max_age_ms
				    : SLUICE_DEFAULT_HTTP_MAX_AGE_MS;
}

/* A connection's own max age: age_ms give or take 10%, as gRPC servers
 * do, so that the connections made at one moment (a restart, a
 * scale-up) do not all go away at once.  0 stays 0 (never). */
static inline uint64_t sluice_config_jitter_age(uint64_t age_ms)
{
	if (!age_ms)
		return 0;
	return age_ms - age_ms / 10 +
	       (uint64_t)((double)(age_ms / 5) * ((double)rand() / RAND_MAX));
}

static inline size_t sluice_config_max_keys(const sluice_config_t *cfg)
{
	return cfg->store.max_keys ? cfg->store.max_keys
				   : SLUICE_DEFAULT_MAX_KEYS;
}

/*
 * Parses a gRPC listen address: what sluice_listen_parse() takes, or
 * "unix:/PATH" (an absolute path that fits a sockaddr_un).  Returns 0, or
 * SLUICE_EINVAL with a message (config/grpc.c).
 */
int sluice_grpc_listen_parse(const char *text, char *err, size_t errlen);

#endif /* SLUICE_POLICY_CONFIG_H */
