/*
 * config.h -- envoyproxy/ratelimit's configuration, as sluice reads it.
 *
 * A directory of YAML files (what envoyproxy/ratelimit finds at
 * RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY/ *.yaml), each
 * holding one `domain` and its tree of `descriptors`:
 *
 *   domain: messaging
 *   descriptors:
 *     - key: message_type
 *       value: marketing            # optional; '*' matches any run
 *       descriptors:
 *         - key: to_number
 *           rate_limit: {unit: day, requests_per_unit: 5}
 *
 * loaded into an immutable tree (one per config snapshot, see policy/live.h).
 * The `envoy:` section of sluice's own config names the directory and the
 * service-wide settings (sluice_envoy_settings_t); policy/config/config.c reads
 * it with sluice_envoy_parse_section() (settings.c).
 *
 * Extensions of sluice (refused by envoyproxy/ratelimit, so a file using
 * them is sluice's own): `burst:` in rate_limit sets the capacity apart
 * from requests_per_unit, and `limits:` in rate_limit gives one
 * descriptor several limits (all must pass).
 */
#ifndef SLUICE_POLICY_ENVOY_CONFIG_H
#define SLUICE_POLICY_ENVOY_CONFIG_H

#include "policy/config/config.h"
#include "policy/config/yaml.h"
#include "policy/envoy/rls.h"
#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Bounds on what a directory may hold (a larger one is surely not a
 * rate-limit config, and each bound keeps load time and memory small). */
#define SLUICE_ENVOY_MAX_FILES	   1024
#define SLUICE_ENVOY_MAX_DEPTH	   16 /* nested descriptor levels */
#define SLUICE_ENVOY_MAX_DIR_DEPTH 8  /* nested folders below config_dir */
#define SLUICE_ENVOY_MAX_TRUSTED   16 /* files.trusted_uids */
/* Descriptor entries in one request descriptor, and descriptors in one
 * request: a request beyond these is refused (INVALID_ARGUMENT / 400). */
#define SLUICE_ENVOY_MAX_ENTRIES     64
#define SLUICE_ENVOY_MAX_DESCRIPTORS 256

struct sluice_envoy_series_s; /* policy/envoy/metrics.h */

/* One limit of a rate_limit block, as Envoy's RateLimit reports it. */
typedef struct sluice_envoy_unit_limit_s {
	uint32_t requests_per_unit;
	sluice_rls_unit_t unit;
} sluice_envoy_unit_limit_t;

/* A `rate_limit:` block. */
typedef struct sluice_envoy_limit_s {
	char *name; /* rate_limit.name, or NULL */
	char **replaces;
	size_t nreplaces;
	int unlimited; /* OK for every request, never charged */
	int blocked;   /* requests_per_unit 0: every request is over */
	/* What current_limit reports for each of set.limits (the first
	 * when there is one limit). */
	sluice_envoy_unit_limit_t units[SLUICE_MAX_LIMITS];
	/* The token buckets: capacity requests_per_unit (or burst),
	 * refilling requests_per_unit per unit. */
	sluice_limit_set_t set;
	/* What the verdict engine charges: name is the descriptor path
	 * ("domain.key_value.key"), shadow and on_store_error as
	 * configured. */
	sluice_rule_t rule;
} sluice_envoy_limit_t;

/* One node of a domain's descriptor tree. */
typedef struct sluice_envoy_node_s {
	char *key;
	char *value;	 /* NULL: any value (the key alone) */
	char **parts;	 /* value split at '*' when wildcard */
	size_t nparts;	 /* 0 unless wildcard */
	int shadow_mode; /* charged, never makes the answer OVER_LIMIT */
	int quota_mode;	 /* the answer is OVER_LIMIT only when every
			    quota descriptor is over (all or nothing) */
	int detailed_metric;
	int value_to_metric;
	int share_threshold;	     /* one bucket for every value the pattern
					matches */
	sluice_envoy_limit_t *limit; /* NULL: no rate_limit block */
	struct sluice_meta_s *metadata; /* `metadata:` (NULL: none) */
	struct sluice_envoy_node_s *children;
	size_t nchildren;
	/* "key_value.key2" from the domain down (metrics label). */
	char *stat_key;
	struct sluice_envoy_series_s *series; /* its metrics (with a
						 limit; else NULL) */
	const char *file; /* the file it came from (the config's copy) */
	int line;
} sluice_envoy_node_t;

typedef struct sluice_envoy_domain_s {
	char *name;
	sluice_envoy_node_t *children;
	size_t nchildren;
	const char *file;
	int line;
} sluice_envoy_domain_t;

/* The `envoy:` section of sluice's config. */
typedef struct sluice_envoy_settings_s {
	char *config_dir; /* absolute, or relative to sluice's config */
	/* LIMIT_RESPONSE_HEADERS_ENABLED and its header names
	 * (LIMIT_LIMIT_HEADER, ...; envoyproxy/ratelimit's defaults). */
	int response_headers;
	char *header_limit;	     /* "RateLimit-Limit" */
	char *header_remaining;	     /* "RateLimit-Remaining" */
	char *header_reset;	     /* "RateLimit-Reset" */
	int shadow_mode;	     /* SHADOW_MODE: the answer is always OK */
	unsigned near_limit_percent; /* NEAR_LIMIT_RATIO x 100: 80 */
	sluice_fail_mode_t on_store_error; /* default closed */
	unsigned watch_ms; /* how often the directory is checked for
			      changes; 0: only on SIGHUP */
	int merge_domains; /* MERGE_DOMAIN_CONFIG: one domain in several
			      files */
	/* The IETF RateLimit-Policy / RateLimit fields (draft-11), apart
	 * from the three headers; their policy name is the limit's `name`
	 * (else "default"), or with ietf_policy_path the descriptor's
	 * path, which shows the config's keys and values to clients. */
	int ietf_headers;
	int ietf_policy_path;
	/* RESPONSE_DYNAMIC_METADATA: RateLimitResponse.dynamic_metadata
	 * (policy/envoy/meta.h). */
	int dynamic_metadata;
	/* statsd: {addr, prefix, tags, flush_ms, dogstatsd}: the counts
	 * also sent over UDP in envoyproxy/ratelimit's StatsD names
	 * (serve/statsd.c); statsd_addr NULL: not sent. */
	char *statsd_addr;   /* "HOST:PORT", numeric */
	char *statsd_prefix; /* before each name, e.g. "prod."; "" */
	char *statsd_tags;   /* DogStatsD "k:v,k2:v2"; NULL: none */
	unsigned statsd_flush_ms;
	int statsd_dog; /* DogStatsD: tags after "|#" */
	/* metrics: the names /metrics shows the Envoy counts under
	 * (SLUICE_ENVOY_METRICS_* of metrics.h; sluice's by default) */
	int metrics_style;
	/* files: owners of the directory's files trusted besides the user
	 * sluice runs as and root (a sidecar that syncs them). */
	uid_t trusted_uids[SLUICE_ENVOY_MAX_TRUSTED];
	size_t ntrusted_uids;
	gid_t trusted_group; /* (gid_t)-1: none */
	/* import_counters: a bucket's first touch reads envoyproxy/
	 * ratelimit's window counter for the descriptor from the same Redis
	 * (import.h); cache_key_prefix: its CACHE_KEY_PREFIX ("") */
	int import_counters;
	char *cache_key_prefix;
	/* xds: the domains come from a control plane (policy/envoy/xds.h),
	 * not config_dir; NULL: from config_dir. */
	struct sluice_envoy_xds_s *xds;
	/* windows: calendar (all domains), or {calendar: [domain, ...]}:
	 * those domains' descriptors are calendar quotas (UTC windows, as
	 * envoyproxy/ratelimit's fixed windows) instead of token buckets.
	 * calendar_domains: "\ndomain\n...\n", NULL for none. */
	int windows_calendar;
	char *calendar_domains;
} sluice_envoy_settings_t;

typedef struct sluice_envoy_config_s {
	sluice_envoy_settings_t settings;
	char *dir; /* the directory as loaded (resolved against the config
		      file's directory) */
	/* sluice_envoy_dir_stamp(dir) taken before any file was read: a
	 * file changed while loading makes the directory's stamp differ
	 * from it, so a watcher that keeps it reloads again (never one
	 * taken after reading, which would hide that change) */
	uint64_t stamp;
	sluice_envoy_domain_t *domains; /* sorted by name */
	size_t ndomains;
	char **files; /* every file read, sorted (nodes point into these) */
	size_t nfiles;
	/* What the loader skipped, one line each ("envoy.config_dir:
	 * skipped PATH: why"), for sluice_envoy_log_skipped(). */
	sluice_buf_t skipped;
	/* The rule a request-supplied limit (RateLimitDescriptor.limit) is
	 * charged under: never shadow. */
	sluice_rule_t override_rule;
} sluice_envoy_config_t;

/*
 * Parses sluice's `envoy:` section into a new config and loads its
 * directory.  `base` is the path of sluice's config file (config_dir is
 * relative to its directory), or NULL.  Errors go to y (the section's
 * own, "FILE:LINE: ...") and, for the directory's files, into y's report
 * naming those files and lines.  Returns 0, or -1 after an error.
 */
int sluice_envoy_parse_section(sluice_yaml_t *y, yaml_node_t *node,
			       const char *base, sluice_envoy_config_t **out);

/*
 * Loads the directory `dir` with `settings` (copied).  Errors: the first
 * into err, every one (up to max_errors lines "FILE:LINE: ...\n") into
 * report (may be NULL); *nerrors counts them.  Returns NULL after any
 * error.
 */
sluice_envoy_config_t *
sluice_envoy_load_dir(const char *dir, const sluice_envoy_settings_t *settings,
		      char *err, size_t errlen, char *report, size_t reportlen,
		      unsigned max_errors, unsigned *nerrors);

/* One file's text as the only file of a config (tests, fuzzing): NULL
 * with "NAME:LINE: ..." in err after an error. */
sluice_envoy_config_t *
sluice_envoy_load_text(const char *name, const char *text, size_t len,
		       const sluice_envoy_settings_t *settings, char *err,
		       size_t errlen);

/*
 * The config of n resources' texts (each in the file loader's format,
 * named texts[i].name in errors: "NAME:LINE: ...") with `settings`
 * (copied), checked as a directory is (a domain in two of them, replaces
 * cycles).  NULL with the first error in err after any error.
 */
struct sluice_envoy_text_s;
sluice_envoy_config_t *
sluice_envoy_load_texts(const struct sluice_envoy_text_s *texts, size_t n,
			const sluice_envoy_settings_t *settings, char *err,
			size_t errlen);

/* Sets the defaults of an `envoy:` section without one. */
void sluice_envoy_settings_init(sluice_envoy_settings_t *s);
/* Frees the strings and the xds settings s holds (not s itself). */
void sluice_envoy_settings_free(sluice_envoy_settings_t *s);

void sluice_envoy_config_free(sluice_envoy_config_t *cfg);

/* The domain of that name, or NULL. */
const sluice_envoy_domain_t *
sluice_envoy_domain(const sluice_envoy_config_t *cfg, const char *name);

/* Seconds in a unit (Envoy's: a month is 30 days, a year 365); 0 for
 * UNKNOWN. */
uint64_t sluice_envoy_unit_seconds(sluice_rls_unit_t unit);
/* "SECOND", "MINUTE", ... (proto3 JSON enum names). */
const char *sluice_envoy_unit_name(sluice_rls_unit_t unit);

/* Logs (info) each entry of the directory the loader skipped. */
void sluice_envoy_log_skipped(const sluice_envoy_config_t *cfg);

/* envoyproxy/ratelimit's /rlconfig page: one line per limit, its
 * domain and path, "messaging.message_type_marketing.to_number:
 * unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: false"
 * (the first limit of a `limits:` list). */
void sluice_envoy_dump(const sluice_envoy_config_t *cfg, sluice_buf_t *out);
/* The unit of a name in any case ("minute", "MINUTE"), or UNKNOWN. */
sluice_rls_unit_t sluice_envoy_unit_parse(const char *name);

/*
 * Builds the token bucket of "requests_per_unit per unit" with capacity
 * `burst` (requests_per_unit when 0).  Returns 0, or a negative code with
 * a message (requests_per_unit 0, a rate the store cannot hold).
 */
int sluice_envoy_limit_make(uint32_t requests_per_unit, sluice_rls_unit_t unit,
			    uint64_t burst, sluice_limit_t *out, char *err,
			    size_t errlen);

/* The calendar quota of "requests_per_unit per unit" (windows: calendar):
 * a count per UTC window of the unit.  0, or a negative code with a
 * message. */
int sluice_envoy_quota_make(uint32_t requests_per_unit, sluice_rls_unit_t unit,
			    sluice_limit_t *out, char *err, size_t errlen);

/* 1 when the settings make `domain`'s descriptors calendar quotas. */
int sluice_envoy_calendar(const sluice_envoy_settings_t *s, const char *domain);

/* Parses envoy.windows (buckets | calendar | {calendar: [domain, ...]})
 * into s; -1 after an error in y. */
int sluice_envoy_parse_windows(sluice_yaml_t *y, yaml_node_t *v,
			       sluice_envoy_settings_t *s);

/* ----------------------------------------------------------- matching */

/* What one request descriptor matched. */
typedef struct sluice_envoy_match_s {
	const sluice_envoy_node_t *node; /* the node whose limit applies,
					    or NULL (no limit) */
	size_t depth;			 /* entries matched, level by level */
	/* Per matched entry: the node, and how it matched. */
	const sluice_envoy_node_t *path[SLUICE_ENVOY_MAX_ENTRIES];
	unsigned char how[SLUICE_ENVOY_MAX_ENTRIES];
	/* Per entry: the wildcard value that stands for the request's
	 * value in the bucket key (share_threshold), or NULL. */
	const char *shared[SLUICE_ENVOY_MAX_ENTRIES];
} sluice_envoy_match_t;

/* sluice_envoy_match_t.how */
#define SLUICE_ENVOY_BY_VALUE	 1 /* key and exact value */
#define SLUICE_ENVOY_BY_WILDCARD 2 /* key and a wildcard value */
#define SLUICE_ENVOY_BY_KEY	 3 /* key, no value in the config */

/*
 * Finds the limit of one descriptor as envoyproxy/ratelimit does: level
 * by level, an entry matches the node with its key and exact value, else
 * the first node (in file order) whose wildcard value matches, else the
 * node with its key and no value; the limit is the one of the node
 * reached by the descriptor's last entry (a descriptor with more or fewer
 * entries than the path to a limit gets none).  Fills *m (m->node NULL
 * when nothing applies).
 */
void sluice_envoy_match(const sluice_envoy_domain_t *domain,
			const sluice_rls_entry_t *entries, size_t n,
			sluice_envoy_match_t *m);

/* 1 when `value` matches the wildcard parts of a node. */
int sluice_envoy_wildcard_match(char *const *parts, size_t nparts,
				const char *value);

/*
 * The store key of a descriptor's bucket:
 *   "envoy:" 0x1f <identity>
 * where identity is the domain and every entry's key and value, each
 * written as <decimal length> ':' <bytes> -- or, for a value shared under
 * share_threshold, <decimal length> '*' <the pattern> -- so that no two
 * descriptors write the same identity (sluice_key_make() hashes long
 * ones).  The limit's own id is added by the store (sluice_limit_id()).
 * Returns the key's length (m->key is NUL-terminated).
 */
size_t sluice_envoy_key(const char *domain, const sluice_rls_entry_t *entries,
			size_t n, const sluice_envoy_match_t *m,
			char out[SLUICE_KEY_MAX]);

/*
 * The metrics series of a matched descriptor: the node's own (its
 * configured path), or, under detailed_metric / value_to_metric, the path
 * spelled with the request's values as envoyproxy/ratelimit names it.
 */
struct sluice_envoy_series_s *
sluice_envoy_match_series(const char *domain, const sluice_rls_entry_t *entries,
			  size_t n, const sluice_envoy_match_t *m);

/*
 * A stamp of the directory as the loader would read it (watch.c): it
 * changes when a YAML file is added, removed, rewritten or replaced, or
 * when the directory or a symlink on the way to it or to a file points
 * elsewhere (a Kubernetes ConfigMap's "..data" swap).  `sluice serve`
 * polls it every watch_ms and reloads when it changes.
 */
uint64_t sluice_envoy_dir_stamp(const char *dir);

#endif /* SLUICE_POLICY_ENVOY_CONFIG_H */
