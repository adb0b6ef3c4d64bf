/*
 * rules.h -- rules and matching: what a rule is (key sources, limits,
 * tiers, overrides) and which rules' buckets a request touches (rules.c).
 * A config (config/config.h) holds the rules; the verdict engine (verdict.h)
 * charges the matches.
 */
#ifndef SLUICE_POLICY_RULES_H
#define SLUICE_POLICY_RULES_H

#include "sluice.h"

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* The loaded config the rules belong to (config/config.h). */
typedef struct sluice_config_s sluice_config_t;

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

/* The limits a key's bucket may have been charged under before a reload
 * changed one limit of its set (config/carry.c): the most recent first,
 * each until the instant from which any bucket under it is full again. */
#define SLUICE_CARRY_MAX 4
typedef struct sluice_carry_from_s {
	sluice_limit_t from[SLUICE_CARRY_MAX];
	int64_t until_us[SLUICE_CARRY_MAX];
	size_t n;
} sluice_carry_from_t;

/* A named set of limits, all of which must pass. */
typedef struct sluice_limit_set_s {
	char *name; /* tier name, or the rule name for plain limits */
	sluice_limit_t limits[SLUICE_MAX_LIMITS];
	size_t nlimits;
	/* carry[i]: the earlier limits of limits[i], whose usage a key
	 * carries to it (sluice_config_carry()); NULL: none. */
	sluice_carry_from_t *carry;
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
	/* 1: this is the request to decide, as a module inside the server
	 * sees it (nginx's sluice_config); 0: a proxy's check of another
	 * request, which `proxy:`'s headers describe (sluice_decide_request(),
	 * policy/request.h). */
	int direct;
} sluice_request_t;

/* One bucket set a request must be charged against. */
typedef struct sluice_match_s {
	const sluice_rule_t *rule;
	const sluice_limit_set_t *set; /* the rule's limits or chosen tier */
	char key[SLUICE_KEY_MAX];      /* "<rule>\x1f<identity>", see
					  sluice_key_make() */
	size_t keylen;
} sluice_match_t;

/* The policy name of a match, as the answers' headers and bodies give
 * it: the rule name, or "rule/tier" for a rule with tiers. */
void sluice_policy_name(const sluice_match_t *m, char *buf, size_t len);

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
 * The canonical form of a path, the one a pattern must already be in:
 * percent-escapes decoded once (but %00), path parameters (";x=1" to the
 * end of each segment) dropped, runs of '/' collapsed, "." and ".."
 * segments resolved.  Writes at most n bytes into out (which may be in)
 * and returns the length.  The config refuses a path pattern that it
 * would change, since such a pattern could never match every reading.
 */
size_t sluice_path_normalize(const char *in, size_t n, char *out);

/*
 * The paths the routers in front of and behind sluice may route a
 * request target by (paths.c lists them: nginx's $uri and Caddy's,
 * Tomcat/Spring's, Express's raw path, Fastify's), each once: the query,
 * the fragment and an absolute-form authority are dropped first.  A path
 * rule applies when it matches any of them.  No allocation for targets up
 * to SLUICE_PATH_STACK / SLUICE_PATH_READINGS bytes; beyond that, when
 * malloc fails, the one reading is the raw path.
 */
#define SLUICE_PATH_READINGS 6
#define SLUICE_PATH_STACK    8192

typedef struct sluice_path_readings_s {
	const char *p[SLUICE_PATH_READINGS];
	size_t len[SLUICE_PATH_READINGS];
	size_t n;
	char *heap;
	char stack[SLUICE_PATH_STACK];
} sluice_path_readings_t;

void sluice_path_readings(const char *path, size_t len,
			  sluice_path_readings_t *pr);
void sluice_path_readings_free(sluice_path_readings_t *pr);

/* The store key of an ad-hoc bucket, one whose limit its caller chose
 * (POST /v1/take, the admin verbs on it, an Envoy descriptor's own
 * `limit`): "\x1e<key>", or "\x1e~<sha256 hex>" for a key too long for
 * m->key or starting with '~'.  The stores evict ad-hoc buckets among
 * themselves (SLUICE_KEY_ADHOC), so a flood of caller-chosen slow limits
 * cannot reset a configured rule's drained bucket. */
void sluice_adhoc_key(const char *key, size_t len, sluice_match_t *m);

#endif /* SLUICE_POLICY_RULES_H */
