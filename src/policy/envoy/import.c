/*
 * import.c -- envoyproxy/ratelimit's counters read into sluice's
 * buckets on their first touch (see import.h, docs/ENVOY.md).
 *
 * The order is the whole point: the import of a bucket must reach the
 * store before the first take of it, else the take writes state and the
 * import (which never touches a bucket with state) finds nothing to do --
 * the client would start with a full bucket.  The Redis client spreads
 * calls over several connections, so sending the import first is not
 * enough: the take waits for the import's answer.  That costs one round
 * trip on a bucket's first touch per worker (the per-thread set below),
 * nothing after.
 */
#include "policy/envoy/import.h"
#include "policy/envoy/metrics.h"
#include "util/invariant.h"

#include "util/log.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- the key format */

/* envoyproxy/ratelimit's UnitToDivider (src/utils/utilities.go): its own
 * table, kept apart from sluice's unit lengths. */
static int64_t divider(sluice_rls_unit_t unit)
{
	switch (unit) {
	case SLUICE_RLS_UNIT_SECOND:
		return 1;
	case SLUICE_RLS_UNIT_MINUTE:
		return 60;
	case SLUICE_RLS_UNIT_HOUR:
		return 3600;
	case SLUICE_RLS_UNIT_DAY:
		return 86400;
	case SLUICE_RLS_UNIT_WEEK:
		return 604800;
	case SLUICE_RLS_UNIT_MONTH:
		return 2592000;
	case SLUICE_RLS_UNIT_YEAR:
		return 31536000;
	default:
		return 0;
	}
}

int sluice_envoy_counter_key(sluice_buf_t *out, const char *prefix,
			     const char *domain,
			     const sluice_rls_entry_t *entries, size_t n,
			     const char *const *shared, sluice_rls_unit_t unit,
			     int64_t now_s)
{
	int64_t div = divider(unit);
	size_t i;

	if (!div)
		return -1;
	sluice_buf_puts(out, prefix ? prefix : "");
	sluice_buf_puts(out, domain);
	sluice_buf_append(out, "_", 1);
	for (i = 0; i < n; i++) {
		const char *v = shared && shared[i] ? shared[i]
				: entries[i].value  ? entries[i].value
						    : "";

		sluice_buf_puts(out, entries[i].key);
		sluice_buf_append(out, "_", 1);
		sluice_buf_puts(out, v);
		sluice_buf_append(out, "_", 1);
	}
	sluice_buf_printf(out, "%lld", (long long)((now_s / div) * div));
	return out->oom ? -1 : 0;
}

/* --------------------------------------------- what this thread imported */

/* A bucket's identity in the per-thread set: its key and its limit (a
 * changed limit is another bucket).  FNV-1a; 0 marks an empty slot. */
static uint64_t bucket_hash(const char *key, size_t keylen,
			    const sluice_limit_t *l)
{
	const uint64_t f[3] = {l->capacity, l->rate.interval, l->rate.per};
	const unsigned char *p = (const unsigned char *)f;
	uint64_t h = 1469598103934665603ull;
	size_t i;

	for (i = 0; i < keylen; i++)
		h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
	for (i = 0; i < sizeof(f); i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h ? h : 1;
}

/* Direct-mapped, so bounded (64 KiB a thread): a bucket pushed out is
 * asked again once, which the store answers with "nothing to do". */
#define SEEN_SLOTS 8192
static _Thread_local uint64_t seen[SEEN_SLOTS];

static int was_imported(uint64_t h)
{
	return seen[h % SEEN_SLOTS] == h;
}

/* ----------------------------------------------------------- importing */

static _Atomic int told; /* the first import was logged */

typedef struct import_s import_t;

/* One bucket's import in flight. */
typedef struct {
	import_t *im;
	uint64_t hash;
} slot_t;

struct import_s {
	void (*then)(void *arg);
	void *arg;
	size_t pending; /* imports in flight, plus one while issuing */
	slot_t slot[];
};

static void unref(import_t *im)
{
	/* then() runs once: the issuing reference is the last to go. */
	SLUICE_ASSERT(im->pending > 0);
	if (--im->pending)
		return;
	im->then(im->arg);
	free(im);
}

static void one_done(void *arg, int status, int allowed)
{
	slot_t *s = arg;

	/* A failure is not remembered: the next request asks again. */
	if (status == 0)
		seen[s->hash % SEEN_SLOTS] = s->hash;
	if (status == 0 && allowed) {
		sluice_envoy_count_import(1);
		if (!atomic_exchange(&told, 1))
			sluice_log_info("envoy.import_counters: a bucket "
					"started with envoyproxy/ratelimit's "
					"count for the first time (further "
					"imports: sluice_envoy_imported_"
					"total)");
	}
	unref(s->im);
}

/* The config match's shared values of a descriptor (share_threshold):
 * the counter is named with the pattern, as envoyproxy/ratelimit does. */
static void shared_of(const sluice_envoy_config_t *cfg,
		      const sluice_rls_request_t *req,
		      const sluice_rls_descriptor_t *rd,
		      sluice_envoy_match_t *m)
{
	const sluice_envoy_domain_t *dom =
		sluice_envoy_domain(cfg, req->domain);

	memset(m->shared, 0, sizeof(m->shared));
	if (dom)
		sluice_envoy_match(dom, rd->entries, rd->nentries, m);
}

/* The buckets of items this thread has not imported yet. */
static size_t count_new(const sluice_envoy_import_item_t *items, size_t n)
{
	size_t i, j, nb = 0;

	for (i = 0; i < n; i++)
		for (j = 0; j < items[i].set->nlimits; j++)
			nb += !was_imported(
				bucket_hash(items[i].key, items[i].keylen,
					    &items[i].set->limits[j]));
	return nb;
}

/* One request's imports being issued: the slots used of the total
 * counted, and the counter name and config match reused from one to the
 * next. */
typedef struct {
	sluice_backend_t *be;
	const sluice_envoy_config_t *cfg;
	const sluice_rls_request_t *req;
	import_t *im;
	size_t nb, total;
	sluice_buf_t name;
	sluice_envoy_match_t *m;
	int64_t now_s;
} issue_t;

/* Asks the store to import each bucket of the item not imported yet,
 * from envoyproxy/ratelimit's counter of its window. */
static void issue_item(issue_t *is, const sluice_envoy_import_item_t *it)
{
	const sluice_envoy_config_t *cfg = is->cfg;
	const sluice_rls_request_t *req = is->req;
	const sluice_rls_descriptor_t *rd = &req->descriptors[it->desc];
	int matched = 0;
	size_t j;

	for (j = 0; j < it->set->nlimits; j++) {
		const sluice_limit_t *l = &it->set->limits[j];
		uint64_t h = bucket_hash(it->key, it->keylen, l);
		sluice_import_item_t one;
		slot_t *s = &is->im->slot[is->nb];

		if (was_imported(h))
			continue;
		if (it->configured && !matched) {
			if (!is->m && !(is->m = malloc(sizeof(*is->m))))
				continue;
			shared_of(cfg, req, rd, is->m);
			matched = 1;
		}
		is->name.len = 0;
		if (sluice_envoy_counter_key(
			    &is->name, cfg->settings.cache_key_prefix,
			    req->domain, rd->entries, rd->nentries,
			    it->configured ? is->m->shared : NULL,
			    it->units[j].unit, is->now_s) < 0)
			continue;
		one.key = it->key;
		one.keylen = it->keylen;
		one.limit = l;
		one.counter = is->name.data;
		one.counterlen = is->name.len;
		one.window_ms = (uint64_t)divider(it->units[j].unit) * 1000;
		/* One slot per limit of every item, counted above. */
		SLUICE_ASSERT(is->nb < is->total);
		sluice_envoy_count_import(0);
		s->im = is->im;
		s->hash = h;
		is->nb++;
		is->im->pending++;
		if (is->be->ops->import(is->be->impl, &one, 1, sluice_now_us(),
					one_done, s) < 0)
			is->im->pending--;
	}
}

void sluice_envoy_import(sluice_backend_t *be, const sluice_envoy_config_t *cfg,
			 const sluice_rls_request_t *req,
			 const sluice_envoy_import_item_t *items, size_t n,
			 void (*then)(void *arg), void *arg)
{
	issue_t is = {.be = be,
		      .cfg = cfg,
		      .req = req,
		      .now_s = sluice_now_us() / 1000000};
	size_t i, nb;

	/* The common case, every bucket imported already by this thread:
	 * no allocation, no store call. */
	if (!be->ops->import || (nb = count_new(items, n)) == 0) {
		then(arg);
		return;
	}
	if (!(is.im = calloc(1, sizeof(*is.im) + nb * sizeof(slot_t)))) {
		/* Out of memory: the take goes on without the import. */
		then(arg);
		return;
	}
	is.im->then = then;
	is.im->arg = arg;
	is.im->pending = 1;
	is.total = nb;
	for (i = 0; i < n; i++)
		issue_item(&is, &items[i]);
	sluice_buf_free(&is.name);
	free(is.m);
	unref(is.im);
}

/* ------------------------------------------------------------- checking */

int sluice_envoy_import_check(sluice_yaml_t *y, yaml_node_t *envoy,
			      const sluice_config_t *cfg)
{
	yaml_node_t *v;

	if (!cfg->envoy || !cfg->envoy->settings.import_counters ||
	    !(v = sluice_yaml_get(y, envoy, "import_counters")))
		return 0;
	if (cfg->store.kind == SLUICE_STORE_REDIS)
		return 0;
	if (cfg->store.kind == SLUICE_STORE_REDIS_CLUSTER)
		return sluice_yaml_error(
			y, v,
			"envoy.import_counters needs a Redis store on one "
			"server (or behind Sentinel): on Redis Cluster "
			"envoyproxy/ratelimit's counter and sluice's bucket "
			"are in different slots, and cannot be read and "
			"written in one atomic call");
	return sluice_yaml_error(y, v,
				 "envoy.import_counters needs store: redis "
				 "(the Redis envoyproxy/ratelimit counts in); "
				 "the %s store holds no envoyproxy/ratelimit "
				 "counters",
				 sluice_config_store_name(cfg));
}
