/*
 * config.h -- the `sluice serve` configuration (YAML) and the rules it holds.
 *
 * config.c parses and validates a file into a sluice_config_t; rules.c
 * answers "which buckets does this request touch?" for the HTTP layer.  The
 * HTTP layer never looks inside YAML, and this layer never does I/O beyond
 * reading the file.
 *
 * A config is immutable once loaded: SIGHUP builds a new one and swaps the
 * pointer, so a request in flight keeps using the config it started with.
 */
#ifndef SLUICE_SERVE_CONFIG_H
#define SLUICE_SERVE_CONFIG_H

#include "sluice.h"
#include "store/store_config.h"

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define SLUICE_MAX_SOURCES 8 /* key sources in one rule */
#define SLUICE_MAX_PARTS   4 /* parts of one composite key source */

/* What to do when the store fails (Redis down or slow). */
typedef enum {
	SLUICE_FAIL_OPEN = 0, /* allow, and count it */
	SLUICE_FAIL_CLOSED,   /* answer 503 with Retry-After */
	SLUICE_FAIL_LOCAL,    /* decide on this instance's memory store */
} sluice_fail_mode_t;

/* One part of a key source. */
typedef enum {
	SLUICE_KEY_HEADER = 0, /* the value of a request header */
	SLUICE_KEY_IP,	       /* the client IP (after trusted proxies, with
				  IPv6 grouped by ipv6_prefix) */
} sluice_key_kind_t;

typedef struct sluice_key_part_s {
	sluice_key_kind_t kind;
	char *header; /* lower-case header name, for SLUICE_KEY_HEADER */
} sluice_key_part_t;

/* A key source: one part ("header:x-user-id", "ip") or a composite of
 * several ("header:x-api-key+ip"); a composite is non-empty only when every
 * part is. */
typedef struct sluice_key_source_s {
	sluice_key_part_t parts[SLUICE_MAX_PARTS];
	size_t nparts;
} sluice_key_source_t;

/* A named set of limits, all of which must pass. */
typedef struct sluice_limit_set_s {
	char *name; /* tier name, or the rule name for plain limits */
	sluice_limit_t limits[SLUICE_MAX_LIMITS];
	size_t nlimits;
} sluice_limit_set_t;

/* Per-key limits of a rule (`overrides:`, `overrides_file:`): identity ->
 * limit set, in an open-addressing table built at load, so a lookup costs
 * one hash and a probe or two however many keys there are. */
typedef struct sluice_override_s {
	char *key; /* the identity, as the rule's key sources give it */
	uint32_t len;
	uint32_t set; /* index into sets */
	int line;     /* where it was given, for messages */
	const char *file;
	int withhold; /* its file may not be quoted (sluice_yaml_t) */
} sluice_override_t;

typedef struct sluice_overrides_s {
	sluice_override_t *entries;
	size_t n, cap;
	uint32_t *slots; /* entry index + 1; 0 empty */
	size_t mask;
	size_t max_probe;	  /* the longest probe of any entry (tests) */
	sluice_limit_set_t *sets; /* distinct limit sets */
	size_t nsets, setcap;
	uint8_t seed[16];
} sluice_overrides_t;

/* Longest override key (identity) in bytes. */
#define SLUICE_OVERRIDE_KEY_MAX 256

typedef struct sluice_rule_s {
	char *name;
	int line; /* where the rule starts in the file, for messages */

	/* match: every method when nmethods is 0 (a rule listing GET also
	 * matches HEAD); every path when path is NULL.  path is a glob ('*'
	 * any run of characters, '?' one) matched against the normalised
	 * request path: without case unless path_case_sensitive, and with or
	 * without one trailing slash unless path_strict_slash (the pattern's
	 * own trailing slash is then dropped at load). */
	char **methods;
	size_t nmethods;
	char *path;
	int path_case_sensitive;
	int path_strict_slash;

	sluice_key_source_t sources[SLUICE_MAX_SOURCES];
	size_t nsources;

	/* Either plain limits (ntiers == 0: limits is used) or tiers chosen by
	 * the value of tier_header, default_tier when absent or unknown. */
	sluice_limit_set_t limits;
	sluice_limit_set_t *tiers;
	size_t ntiers;
	char *tier_header;   /* lower-case */
	size_t default_tier; /* index into tiers */

	sluice_overrides_t *overrides; /* NULL: none; beats tiers */

	uint64_t cost; /* tokens per request, default 1 */
	sluice_fail_mode_t on_store_error;
	int shadow; /* decide and count, never reject */
} sluice_rule_t;

/* A CIDR block of trusted proxies. */
typedef struct sluice_cidr_s {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	unsigned prefix;
} sluice_cidr_t;

/* Event-loop threads: `threads` in the file and --threads accept 1 to
 * this, one range everywhere. */
#define SLUICE_MAX_THREADS 64

/* Upper ends of http.max_header_bytes and http.max_body_bytes (config.c
 * says why). */
#define SLUICE_MAX_HEADER_BYTES_CAP (64 * 1024)
#define SLUICE_MAX_BODY_BYTES_CAP   (64 * 1024)

/* The gRPC listener (src/grpc/; config_grpc.c): off unless `grpc.listen`
 * or --grpc-listen gives an address. */
typedef struct sluice_grpc_config_s {
	char *listen; /* "HOST:PORT", "[V6]:PORT" or "unix:/PATH"; NULL: off */
	size_t max_message_bytes; /* RESOURCE_EXHAUSTED beyond; 0: 64 KiB */
} sluice_grpc_config_t;

/* Upper end of grpc.max_message_bytes. */
#define SLUICE_GRPC_MAX_MESSAGE_CAP (4 * 1024 * 1024)

typedef struct sluice_config_s {
	char *path;	  /* the file, or NULL for the built-in default */
	char *listen;	  /* "HOST:PORT", "[V6]:PORT"; default 127.0.0.1:8080 */
	unsigned threads; /* default 1 */
	sluice_store_config_t store;
	sluice_cidr_t *trusted_proxies;
	size_t ntrusted;
	unsigned ipv6_prefix; /* default 64 */
	/* limits on what clients send (defaults in config.c) */
	size_t max_header_bytes;  /* 431 beyond */
	size_t max_body_bytes;	  /* 413 beyond */
	unsigned idle_timeout_ms; /* close idle keep-alive connections */
	sluice_rule_t *rules;
	size_t nrules;
	/* The bearer token of the admin endpoints; NULL: they are off. */
	char *admin_token;
	/* admin.listen: the admin endpoints' own listener ("HOST:PORT");
	 * NULL: they are served on `listen` with the rest. */
	char *admin_listen;
	/* proxy: the headers (lower-case) that give /v1/check the method
	 * and URI of the request it decides; both "" for envoy; proxy_set 0
	 * for the default, nginx's (config_proxy.c). */
	int proxy_set;
	char proxy_method[64], proxy_uri[64];
	sluice_grpc_config_t grpc;
	/* The `envoy:` section and its loaded directory (src/envoy/
	 * config.h); NULL when absent. */
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
 * Parses a listen address, "ADDRESS:PORT" or "[IPV6]:PORT" with a numeric
 * address (the form of `listen:` and `--listen`).  Returns 0, or
 * SLUICE_EINVAL with a message saying what was expected.
 */
int sluice_listen_parse(const char *text, struct sockaddr_storage *ss,
			char *err, size_t errlen);

/*
 * Parses a gRPC listen address: what sluice_listen_parse() takes, or
 * "unix:/PATH" (an absolute path that fits a sockaddr_un).  Returns 0, or
 * SLUICE_EINVAL with a message (config_grpc.c).
 */
int sluice_grpc_listen_parse(const char *text, char *err, size_t errlen);

/* ------------------------------------------------------------ requests */

/* What the rules need to know about one request. */
typedef struct sluice_request_s {
	const char *method;
	size_t method_len;
	const char *path; /* without the query string */
	size_t path_len;
	/* Looks up a header by lower-case name; returns NULL when absent. */
	const char *(*header)(void *ctx, const char *name, size_t *len);
	/* Optional: the index-th line (0 first) of a header sent on several
	 * lines, NULL past the last.  Without it, `header` is taken as the
	 * only line.  X-Forwarded-For lines are one list in order; a header
	 * used as an identity (key, tier, X-Real-IP) that comes on more than
	 * one line is not used, so no client picks its bucket by adding one. */
	const char *(*header_line)(void *ctx, const char *name, size_t index,
				   size_t *len);
	void *header_ctx;
	/* The TCP peer. */
	const struct sockaddr *peer;
} sluice_request_t;

/* One bucket set a request must be charged against. */
typedef struct sluice_match_s {
	const sluice_rule_t *rule;
	const sluice_limit_set_t *set; /* the rule's limits or chosen tier */
	char key[SLUICE_KEY_MAX];      /* "<rule>\x1f<identity>", see
					  sluice_key_make() */
	size_t keylen;
} sluice_match_t;

/*
 * Fills out[] with the rules that apply to the request (up to max), each
 * with its store key and limit set.  A rule whose key sources are all empty
 * is skipped (there is nobody to charge).  Returns the number of matches.
 */
size_t sluice_rules_match(const sluice_config_t *cfg,
			  const sluice_request_t *req, sluice_match_t *out,
			  size_t max);

/*
 * The headers that carry the method and the URI of the request /v1/check
 * decides, as `proxy:` names them (X-Original-* by default); NULL for
 * either means the check request's own (proxy: envoy).  Only these are
 * read: the other proxies' headers may come from the client.
 */
void sluice_config_proxy_headers(const sluice_config_t *cfg,
				 const char **method, const char **uri);

/*
 * The client address: the TCP peer, unless the peer is a trusted proxy, in
 * which case X-Real-IP (when sent on exactly one line), else the
 * right-most untrusted entry of X-Forwarded-For (all its lines, in order,
 * as one list).  Forwarded (RFC 7239) is not read.  IPv4-mapped IPv6 counts as
 * IPv4; IPv6 is truncated to ipv6_prefix bits.  Writes text ("203.0.113.7",
 * "2001:db8:1:2::/64") into buf and returns its length (0 when unknown).
 */
size_t sluice_client_ip(const sluice_config_t *cfg, const sluice_request_t *req,
			char *buf, size_t len);

/*
 * Writes the store key of `rule` for one identity into m->key and
 * m->keylen with sluice_key_make() (which says how an identity is
 * encoded); a composite identity is given as its parts joined by 0x1f.
 * sluice_rules_match() builds keys the same way; /v1/take and the admin
 * endpoints call this so that the same identity reaches the same bucket.
 */
void sluice_rule_key(const sluice_rule_t *rule, const char *identity,
		     size_t len, sluice_match_t *m);

/*
 * The limit set of a rule for a tier name (compared without regard to
 * case): the rule's limits when it has no tiers, the default tier when
 * the name is NULL, empty or unknown.
 */
const sluice_limit_set_t *sluice_rule_tier(const sluice_rule_t *rule,
					   const char *tier, size_t len);

/*
 * The limit set an override gives `identity` under `rule`, or NULL.  The
 * identity is bufs[0..nb) concatenated (the parts of a composite key with
 * their 0x1f separators, as sluice_key_make() takes them).
 */
const sluice_limit_set_t *sluice_rule_override(const sluice_rule_t *rule,
					       const void *const *bufs,
					       const size_t *lens, size_t nb);

/*
 * The path glob of a rule: '*' matches any run of characters (slashes
 * included), '?' exactly one character, anything else itself.  Matches
 * the whole of s[0..len).  Returns 1 on a match.
 */
int sluice_glob_match(const char *pattern, const char *s, size_t len);

/* The same, comparing letters without regard to (ASCII) case. */
int sluice_glob_match_nocase(const char *pattern, const char *s, size_t len);

/*
 * The normalisation a request path gets before matching: percent-escapes
 * decoded (but %2F and %00), path parameters (";x=1" to the end of each
 * segment) dropped, runs of '/' collapsed, "." and ".." segments
 * resolved.  Writes at most n bytes into out (which may be in) and returns
 * the length.  The config refuses a path pattern that it would change,
 * since such a pattern could never match.
 */
size_t sluice_path_normalize(const char *in, size_t n, char *out);

#endif /* SLUICE_SERVE_CONFIG_H */
