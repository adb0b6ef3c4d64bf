/*
 * settings.c -- the `envoy:` section of sluice's config:
 *
 *   envoy:
 *     config_dir: /etc/ratelimit/config   # envoyproxy/ratelimit's YAML files
 *     response_headers: true              # LIMIT_RESPONSE_HEADERS_ENABLED
 *     header_names: {limit: RateLimit-Limit, remaining: RateLimit-Remaining,
 *                    reset: RateLimit-Reset}
 *     shadow_mode: false                  # SHADOW_MODE
 *     near_limit_ratio: 0.8               # NEAR_LIMIT_RATIO
 *     on_store_error: closed              # open | closed | local
 *     watch_ms: 1000                      # 0: reload on SIGHUP only
 *     merge_domains: false                # MERGE_DOMAIN_CONFIG
 *     ietf_headers: false                 # RateLimit-Policy / RateLimit
 *     ietf_policy_names: name             # name | path
 *     response_dynamic_metadata: false    # RESPONSE_DYNAMIC_METADATA
 *     files: {trusted_uids: [65533], trusted_group: git-sync}
 *     metrics: sluice                     # sluice | ratelimit | both
 *     windows: buckets                    # calendar | {calendar: [domain]}
 *     statsd: {addr: "127.0.0.1:8125", prefix: "", tags: {env: prod},
 *              flush_ms: 10000, dogstatsd: false}
 *     import_counters: false              # envoyproxy's counters on first
 *     cache_key_prefix: ""                #   touch (import.h)
 *     xds: {server: HOST:PORT, node_id: ...}  # instead of config_dir
 *                                             # (policy/envoy/xds.h)
 *
 * Each field's default, check and reload behaviour are here: a reload
 * (SIGHUP, or a change in the directory) rereads all of them.
 */
#include "policy/config/internal.h"
#include "policy/envoy/config.h"
#include "policy/envoy/metrics.h"
#include "policy/envoy/xds.h"

#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dup_field(sluice_yaml_t *y, yaml_node_t *v, const char *what,
		     char **out)
{
	const char *s;
	size_t i;

	if (sluice_yaml_string(y, v, what, &s) < 0)
		return -1;
	if (!*s || strlen(s) > 128)
		return sluice_yaml_error(y, v,
					 "%s is empty or too long; expected "
					 "a header name",
					 what);
	for (i = 0; s[i]; i++)
		if (s[i] <= ' ' || s[i] >= 0x7f ||
		    strchr("()<>@,;:\\\"/[]?={}", s[i]))
			return sluice_yaml_error(y, v,
						 "%s \"%.60s\" is not a header "
						 "name; expected a token such "
						 "as X-RateLimit-Limit",
						 what, s);
	free(*out);
	*out = strdup(s);
	return *out ? 0 : sluice_yaml_nomem(y, v);
}

static int parse_header_names(sluice_yaml_t *y, yaml_node_t *node,
			      sluice_envoy_settings_t *s)
{
	static const char *const keys[] = {"limit", "remaining", "reset", NULL};
	char **dst[3] = {&s->header_limit, &s->header_remaining,
			 &s->header_reset};
	yaml_node_t *v;
	int i, rc = 0;

	if (sluice_yaml_expect_map(y, node, "envoy.header_names") < 0 ||
	    sluice_yaml_check_keys(y, node, "envoy.header_names", keys) < 0)
		return -1;
	for (i = 0; i < 3; i++)
		if ((v = sluice_yaml_get(y, node, keys[i])) &&
		    dup_field(y, v, "envoy.header_names entry", dst[i]) < 0)
			rc = -1;
	return rc;
}

/* A group by name or number into *out. */
static int parse_group(sluice_yaml_t *y, yaml_node_t *v, gid_t *out)
{
	struct group gr, *g = NULL;
	char buf[4096], *end;
	const char *s;
	unsigned long n;

	if (sluice_yaml_string(y, v, "envoy.files.trusted_group", &s) < 0)
		return -1;
	n = strtoul(s, &end, 10);
	if (*s && !*end && n < (gid_t)-1) {
		*out = (gid_t)n;
		return 0;
	}
	if (getgrnam_r(s, &gr, buf, sizeof(buf), &g) != 0 || !g)
		return sluice_yaml_error(y, v,
					 "envoy.files.trusted_group \"%.60s\" "
					 "is no group of this host; expected "
					 "a group name or number",
					 s);
	*out = g->gr_gid;
	return 0;
}

/* files: {trusted_uids: [...], trusted_group: NAME}: owners whose files
 * the loader reads besides sluice's own user and root. */
static int parse_files(sluice_yaml_t *y, yaml_node_t *node,
		       sluice_envoy_settings_t *s)
{
	static const char *const keys[] = {"trusted_uids", "trusted_group",
					   NULL};
	yaml_node_t *v, *item;
	uint64_t u;
	size_t i, n;
	int rc = 0;

	if (sluice_yaml_expect_map(y, node, "envoy.files") < 0 ||
	    sluice_yaml_check_keys(y, node, "envoy.files", keys) < 0)
		return -1;
	if ((v = sluice_yaml_get(y, node, "trusted_uids"))) {
		if (sluice_yaml_expect_seq(y, v, "envoy.files.trusted_uids") <
		    0)
			return -1;
		n = sluice_yaml_seq_len(v);
		if (n > SLUICE_ENVOY_MAX_TRUSTED)
			return sluice_yaml_error(
				y, v,
				"envoy.files.trusted_uids holds %zu uids; "
				"expected at most %d",
				n, SLUICE_ENVOY_MAX_TRUSTED);
		for (i = 0; i < n; i++) {
			item = sluice_yaml_seq_at(y, v, i);
			if (!item ||
			    sluice_yaml_uint(y, item,
					     "envoy.files.trusted_uids "
					     "entry",
					     0, (uid_t)-1 - 1, &u) < 0) {
				rc = -1;
				continue;
			}
			s->trusted_uids[s->ntrusted_uids++] = (uid_t)u;
		}
	}
	if ((v = sluice_yaml_get(y, node, "trusted_group")) &&
	    parse_group(y, v, &s->trusted_group) < 0)
		rc = -1;
	return rc;
}

/* ietf_policy_names: name (the limit's name, else "default") | path. */
static int parse_policy_names(sluice_yaml_t *y, yaml_node_t *v, int *path)
{
	const char *s;

	if (sluice_yaml_string(y, v, "envoy.ietf_policy_names", &s) < 0)
		return -1;
	if (strcmp(s, "name") == 0)
		*path = 0;
	else if (strcmp(s, "path") == 0)
		*path = 1;
	else
		return sluice_yaml_error(y, v,
					 "envoy.ietf_policy_names is "
					 "\"%.40s\"; expected name or path",
					 s);
	return 0;
}

/* A StatsD name part or tag: no byte that ends a StatsD field. */
static int statsd_safe(sluice_yaml_t *y, yaml_node_t *v, const char *what,
		       const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (s[i] <= ' ' || s[i] == ':' || s[i] == '|' || s[i] == '#' ||
		    s[i] == ',' || s[i] == 0x7f)
			return sluice_yaml_error(y, v,
						 "%s \"%.60s\" holds a space, "
						 "':', '|', '#' or ','; "
						 "expected a plain name",
						 what, s);
	return 0;
}

/* statsd.tags: {name: value, ...} into s->statsd_tags, "name:value,...";
 * every pair is checked, a wrong one left out. */
static int parse_statsd_tags(sluice_yaml_t *y, yaml_node_t *v,
			     sluice_envoy_settings_t *s)
{
	sluice_buf_t tags = {0};
	yaml_node_pair_t *p;
	const char *k, *str;
	int rc = 0;

	if (sluice_yaml_expect_map(y, v, "envoy.statsd.tags") < 0)
		return -1;
	for (p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *kn = yaml_document_get_node(&y->doc, p->key);
		yaml_node_t *vn = yaml_document_get_node(&y->doc, p->value);

		if (sluice_yaml_string(y, kn, "envoy.statsd.tags key", &k) <
			    0 ||
		    statsd_safe(y, kn, "envoy.statsd.tags key", k) < 0 ||
		    sluice_yaml_string(y, vn, "envoy.statsd.tags value", &str) <
			    0 ||
		    statsd_safe(y, vn, "envoy.statsd.tags value", str) < 0) {
			rc = -1;
			continue;
		}
		sluice_buf_printf(&tags, "%s%s:%s", tags.len ? "," : "", k,
				  str);
	}
	sluice_buf_append(&tags, "", 1);
	if (tags.oom)
		rc = sluice_yaml_nomem(y, v);
	else if (tags.len > 1 &&
		 sluice_config_set_string(&s->statsd_tags, tags.data) < 0)
		rc = sluice_yaml_nomem(y, v);
	sluice_buf_free(&tags);
	return rc;
}

/* statsd: {addr, prefix, tags, flush_ms, dogstatsd}. */
static int parse_statsd(sluice_yaml_t *y, yaml_node_t *node,
			sluice_envoy_settings_t *s)
{
	static const char *const keys[] = {"addr",     "prefix",    "tags",
					   "flush_ms", "dogstatsd", NULL};
	struct sockaddr_storage ss;
	yaml_node_t *v;
	const char *str;
	char msg[256];
	uint64_t u;
	int rc = 0;

	if (sluice_yaml_expect_map(y, node, "envoy.statsd") < 0 ||
	    sluice_yaml_check_keys(y, node, "envoy.statsd", keys) < 0)
		return -1;
	if (!(v = sluice_yaml_get(y, node, "addr")))
		return sluice_yaml_error(y, node,
					 "envoy.statsd has no addr; expected "
					 "e.g. addr: \"127.0.0.1:8125\"");
	if (sluice_yaml_string(y, v, "envoy.statsd.addr", &str) < 0)
		return -1;
	if (sluice_listen_parse(str, &ss, msg, sizeof(msg)) < 0)
		return sluice_yaml_error(y, v, "envoy.statsd.addr: %s", msg);
	if (sluice_config_set_string(&s->statsd_addr, str) < 0)
		return sluice_yaml_nomem(y, v);
	if ((v = sluice_yaml_get(y, node, "prefix"))) {
		if (sluice_yaml_string(y, v, "envoy.statsd.prefix", &str) < 0 ||
		    statsd_safe(y, v, "envoy.statsd.prefix", str) < 0)
			rc = -1;
		else if (sluice_config_set_string(&s->statsd_prefix, str) < 0)
			return sluice_yaml_nomem(y, v);
	}
	if ((v = sluice_yaml_get(y, node, "flush_ms"))) {
		if (sluice_yaml_uint(y, v, "envoy.statsd.flush_ms", 100,
				     3600000, &u) < 0)
			rc = -1;
		else
			s->statsd_flush_ms = (unsigned)u;
	}
	if ((v = sluice_yaml_get(y, node, "dogstatsd")) &&
	    sluice_yaml_bool(y, v, "envoy.statsd.dogstatsd", &s->statsd_dog) <
		    0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "tags")) &&
	    parse_statsd_tags(y, v, s) < 0)
		rc = -1;
	return rc;
}

/* metrics: sluice | ratelimit | both. */
static int parse_metrics(sluice_yaml_t *y, yaml_node_t *v, int *style)
{
	const char *s;

	if (sluice_yaml_string(y, v, "envoy.metrics", &s) < 0)
		return -1;
	if (strcmp(s, "sluice") == 0)
		*style = SLUICE_ENVOY_METRICS_SLUICE;
	else if (strcmp(s, "ratelimit") == 0)
		*style = SLUICE_ENVOY_METRICS_RATELIMIT;
	else if (strcmp(s, "both") == 0)
		*style = SLUICE_ENVOY_METRICS_SLUICE |
			 SLUICE_ENVOY_METRICS_RATELIMIT;
	else
		return sluice_yaml_error(y, v,
					 "envoy.metrics is \"%.40s\"; expected "
					 "sluice, ratelimit (envoyproxy/"
					 "ratelimit's names, as a "
					 "statsd_exporter shows them) or both",
					 s);
	return 0;
}

/* "0.8" (NEAR_LIMIT_RATIO) into a whole percentage. */
static int parse_ratio(sluice_yaml_t *y, yaml_node_t *v, unsigned *out)
{
	const char *s;
	char *end;
	double d;

	if (sluice_yaml_string(y, v, "envoy.near_limit_ratio", &s) < 0)
		return -1;
	d = strtod(s, &end);
	if (end == s || *end || !(d > 0 && d <= 1))
		return sluice_yaml_error(y, v,
					 "envoy.near_limit_ratio is \"%.40s\"; "
					 "expected a number above 0 and at "
					 "most 1 (e.g. 0.8)",
					 s);
	*out = (unsigned)(d * 100 + 0.5);
	return 0;
}

static int parse_fail(sluice_yaml_t *y, yaml_node_t *v, sluice_fail_mode_t *out)
{
	const char *s;

	if (sluice_yaml_string(y, v, "envoy.on_store_error", &s) < 0)
		return -1;
	if (strcmp(s, "open") == 0)
		*out = SLUICE_FAIL_OPEN;
	else if (strcmp(s, "closed") == 0)
		*out = SLUICE_FAIL_CLOSED;
	else if (strcmp(s, "local") == 0)
		*out = SLUICE_FAIL_LOCAL;
	else
		return sluice_yaml_error(y, v,
					 "envoy.on_store_error is \"%.40s\"; "
					 "expected open, closed or local",
					 s);
	return 0;
}

/* config_dir against the directory of sluice's config file. */
static char *resolve(const char *dir, const char *base)
{
	const char *slash = base ? strrchr(base, '/') : NULL;
	size_t n;
	char *out;

	if (dir[0] == '/' || !slash)
		return strdup(dir);
	n = (size_t)(slash - base) + 1 + strlen(dir) + 1;
	if ((out = malloc(n)))
		snprintf(out, n, "%.*s/%s", (int)(slash - base), base, dir);
	return out;
}

/* The settings of `envoy:` other than where the config comes from, into
 * s: 0, -1 when one was wrong (each reported, the rest still read), or
 * SLUICE_ENOMEM (reported) when reading must stop. */
static int parse_settings(sluice_yaml_t *y, yaml_node_t *node,
			  sluice_envoy_settings_t *s)
{
	yaml_node_t *v;
	uint64_t u;
	int rc = 0;

	if ((v = sluice_yaml_get(y, node, "response_headers")) &&
	    sluice_yaml_bool(y, v, "envoy.response_headers",
			     &s->response_headers) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "ietf_headers")) &&
	    sluice_yaml_bool(y, v, "envoy.ietf_headers", &s->ietf_headers) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "response_dynamic_metadata")) &&
	    sluice_yaml_bool(y, v, "envoy.response_dynamic_metadata",
			     &s->dynamic_metadata) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "ietf_policy_names")) &&
	    parse_policy_names(y, v, &s->ietf_policy_path) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "statsd")) &&
	    parse_statsd(y, v, s) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "windows")) &&
	    sluice_envoy_parse_windows(y, v, s) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "metrics")) &&
	    parse_metrics(y, v, &s->metrics_style) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "files")) && parse_files(y, v, s) < 0)
		rc = -1;
	/* The store is checked by sluice_envoy_import_check(). */
	if ((v = sluice_yaml_get(y, node, "import_counters")) &&
	    sluice_yaml_bool(y, v, "envoy.import_counters",
			     &s->import_counters) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "cache_key_prefix"))) {
		const char *str;

		if (sluice_yaml_string(y, v, "envoy.cache_key_prefix", &str) <
		    0)
			rc = -1;
		else if (sluice_config_set_string(&s->cache_key_prefix, str) <
			 0) {
			sluice_yaml_nomem(y, v);
			return SLUICE_ENOMEM;
		}
	}
	if ((v = sluice_yaml_get(y, node, "merge_domains")) &&
	    sluice_yaml_bool(y, v, "envoy.merge_domains", &s->merge_domains) <
		    0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "shadow_mode")) &&
	    sluice_yaml_bool(y, v, "envoy.shadow_mode", &s->shadow_mode) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "header_names")) &&
	    parse_header_names(y, v, s) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "near_limit_ratio")) &&
	    parse_ratio(y, v, &s->near_limit_percent) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "on_store_error")) &&
	    parse_fail(y, v, &s->on_store_error) < 0)
		rc = -1;
	if ((v = sluice_yaml_get(y, node, "watch_ms"))) {
		if (sluice_yaml_uint(y, v, "envoy.watch_ms", 0, 3600000, &u) <
		    0)
			rc = -1;
		else
			s->watch_ms = (unsigned)u;
	}
	return rc;
}

/* Where the rate limit config comes from: a control plane (xds, whose
 * config starts empty in *out) or a directory (config_dir, resolved
 * against base into *path for the loader).  rc is what the settings'
 * reading gave: a source is still checked after an error, never loaded. */
static int parse_source(sluice_yaml_t *y, yaml_node_t *node, const char *base,
			sluice_envoy_settings_t *s, int rc,
			sluice_envoy_config_t **out, char **path)
{
	yaml_node_t *v, *dirnode = sluice_yaml_get(y, node, "config_dir");
	const char *dir;

	if ((v = sluice_yaml_get(y, node, "xds"))) {
		if (sluice_envoy_xds_parse(y, v, base, &s->xds) < 0)
			rc = -1;
		if (dirnode)
			rc = sluice_yaml_error(y, dirnode,
					       "envoy has both config_dir and "
					       "xds; expected one source of "
					       "the rate limit config");
		s->watch_ms = 0; /* nothing to poll */
		if (rc == 0 && !(*out = sluice_envoy_load_texts(
					 NULL, 0, s, y->err, y->errlen)))
			rc = sluice_yaml_nomem(y, v);
	} else if (!dirnode)
		rc = sluice_yaml_error(y, node,
				       "envoy has no config_dir; expected the "
				       "directory of envoyproxy/ratelimit "
				       "YAML files");
	else if (sluice_yaml_string(y, dirnode, "envoy.config_dir", &dir) < 0)
		rc = -1;
	else if (!(*path = resolve(dir, base)) ||
		 !(s->config_dir = strdup(dir)))
		rc = sluice_yaml_nomem(y, dirnode);
	return rc;
}

/* The directory at path loaded into *out; its files' errors are counted
 * in y and added to its report, the first kept as y's message. */
static int load_dir(sluice_yaml_t *y, const char *path,
		    const sluice_envoy_settings_t *s,
		    sluice_envoy_config_t **out)
{
	unsigned nerr = 0;
	char first[1024];
	size_t used = y->report ? strlen(y->report) : 0;

	*out = sluice_envoy_load_dir(
		path, s, first, sizeof(first),
		y->report ? y->report + used : NULL,
		y->report ? y->reportlen - used : 0,
		y->max_errors > y->nerrors ? y->max_errors - y->nerrors : 0,
		&nerr);
	if (*out)
		return 0;
	/* The files' own errors name their files; count them in y and keep
	 * the first as y's. */
	if (y->nerrors == 0 && y->errlen)
		snprintf(y->err, y->errlen, "%s", first);
	y->nerrors += nerr;
	if (y->report)
		y->reportused = strlen(y->report);
	return -1;
}

int sluice_envoy_parse_section(sluice_yaml_t *y, yaml_node_t *node,
			       const char *base, sluice_envoy_config_t **out)
{
	static const char *const keys[] = {"config_dir",
					   "response_headers",
					   "header_names",
					   "shadow_mode",
					   "near_limit_ratio",
					   "on_store_error",
					   "watch_ms",
					   "merge_domains",
					   "ietf_headers",
					   "ietf_policy_names",
					   "response_dynamic_metadata",
					   "files",
					   "metrics",
					   "statsd",
					   "import_counters",
					   "cache_key_prefix",
					   "xds",
					   "windows",
					   NULL};
	sluice_envoy_settings_t s;
	char *path = NULL;
	int rc = 0;

	*out = NULL;
	sluice_envoy_settings_init(&s);
	if (sluice_yaml_expect_map(y, node, "envoy") < 0)
		return -1;
	if (sluice_yaml_check_keys(y, node, "envoy", keys) < 0)
		rc = -1;
	switch (parse_settings(y, node, &s)) {
	case 0:
		break;
	case SLUICE_ENOMEM:
		sluice_envoy_settings_free(&s);
		return -1;
	default:
		rc = -1;
	}
	rc = parse_source(y, node, base, &s, rc, out, &path);
	if (rc == 0 && !s.xds)
		rc = load_dir(y, path, &s, out);
	free(path);
	sluice_envoy_settings_free(&s);
	if (rc < 0) {
		sluice_envoy_config_free(*out);
		*out = NULL;
	}
	return rc;
}
