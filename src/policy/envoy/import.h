/*
 * import.h -- cutting over from envoyproxy/ratelimit without
 * resetting anyone (envoy.import_counters, docs/ENVOY.md).
 *
 * envoyproxy/ratelimit counts each descriptor in a fixed window, in Redis
 * under CACHE_KEY_PREFIX + domain + "_" + (key "_" value "_")... +
 * the window's start in decimal seconds.  With import_counters on, a
 * bucket's first touch on a worker reads that counter (same Redis, same
 * prefix) and starts the bucket with its usage, through the store's
 * import verb (store.h): only a bucket that holds no state, once per
 * window, so repeating it is harmless.
 */
#ifndef SLUICE_POLICY_ENVOY_IMPORT_H
#define SLUICE_POLICY_ENVOY_IMPORT_H

#include "policy/config/config.h"
#include "policy/config/yaml.h"
#include "policy/envoy/config.h"
#include "store/store.h"
#include "util/buf.h"

#include <stddef.h>
#include <stdint.h>

/*
 * Appends envoyproxy/ratelimit's counter key (its GenerateCacheKey) for
 * the descriptor entries[0..n) of `domain` under a limit of `unit` at
 * now_s (unix seconds): prefix domain "_" then key "_" value "_" for
 * each entry -- the value replaced by shared[i] when not NULL (a value
 * shared under share_threshold: its wildcard pattern; shared may be
 * NULL) -- then (now_s / divider) * divider, the divider the unit's
 * seconds (SECOND 1 ... YEAR 31536000).  Returns 0, or -1 for a unit
 * with no window (UNKNOWN) or out of memory (out->oom).
 */
int sluice_envoy_counter_key(sluice_buf_t *out, const char *prefix,
			     const char *domain,
			     const sluice_rls_entry_t *entries, size_t n,
			     const char *const *shared, sluice_rls_unit_t unit,
			     int64_t now_s);

/* One charged descriptor's buckets to import: request descriptor
 * `desc`, its bucket key, its limits and their units (units[j] of
 * set->limits[j]); `configured`: its limit is the config's (a shared
 * value then names the counter), else the request's own. */
typedef struct sluice_envoy_import_item_s {
	size_t desc;
	const char *key;
	size_t keylen;
	const sluice_limit_set_t *set;
	const sluice_envoy_unit_limit_t *units;
	int configured;
} sluice_envoy_import_item_t;

/*
 * Issues the store's import for each item's buckets this thread has not
 * imported yet (a bounded per-thread set: a bucket once per worker while
 * it stays in the set; the store's own once-per-window rule makes a
 * repeat harmless), then runs then(arg) exactly once when the store has
 * answered them all -- at once (maybe before this returns) when there
 * is nothing to import or the store cannot.  The take the caller issues
 * from then() therefore sees the imported state.  A failed import is
 * not remembered (the next request tries again) and does not stop the
 * take, whose own answer says whether the store failed.  req and items
 * are read during the call only.
 */
void sluice_envoy_import(sluice_backend_t *be, const sluice_envoy_config_t *cfg,
			 const sluice_rls_request_t *req,
			 const sluice_envoy_import_item_t *items, size_t n,
			 void (*then)(void *arg), void *arg);

/*
 * The config's check: envoy.import_counters needs a store that holds
 * envoyproxy/ratelimit's counters -- Redis on one server (or behind
 * Sentinel); a memory or shared store has none, and a cluster cannot
 * read the counter and the bucket (different slots) in one atomic call.
 * `envoy` is the envoy: section's node; an error names the
 * import_counters line.  Returns 0, or -1 after an error in y.
 */
int sluice_envoy_import_check(sluice_yaml_t *y, yaml_node_t *envoy,
			      const sluice_config_t *cfg);

#endif /* SLUICE_POLICY_ENVOY_IMPORT_H */
