/*
 * rulestate.c -- see rulestate.h.
 */
#include "sim/rulestate.h"

#include <stdlib.h>
#include <string.h>

int sluice_rulestate_init(sluice_rulestate_t *rs, const sluice_config_t *cfg)
{
	memset(rs, 0, sizeof(*rs));
	rs->cfg = cfg;
	rs->keys = sluice_keymap_new();
	/* store.max_keys, or its default (as serve) */
	sluice_memstore_open(&rs->store, sluice_config_max_keys(cfg), NULL, 0);
	rs->take = sluice_take_new();
	if (!rs->keys || !rs->store || !rs->take) {
		sluice_rulestate_free(rs);
		return SLUICE_ENOMEM;
	}
	sluice_backend_memory(&rs->be, rs->store);
	return 0;
}

void sluice_rulestate_free(sluice_rulestate_t *rs)
{
	sluice_keymap_free(rs->keys);
	sluice_memstore_free(rs->store);
	sluice_take_free(rs->take);
	free(rs->hits);
	memset(rs, 0, sizeof(*rs));
}

static void on_verdict(void *arg, const sluice_verdict_t *v)
{
	sluice_rulestate_t *rs = arg;

	rs->pass = v->allowed;
}

int sluice_rulestate_decide(sluice_rulestate_t *rs, const sluice_request_t *req,
			    int64_t now_us, const sluice_rule_hit_t **hits,
			    size_t *nhits)
{
	sluice_take_t *t = rs->take;
	size_t i;

	*hits = rs->hits;
	*nhits = 0;
	if (sluice_take_match(t, rs->cfg, req) < 0)
		return SLUICE_ENOMEM;
	if (t->nmatches > rs->hcap) {
		sluice_rule_hit_t *h =
			realloc(rs->hits, t->cap * sizeof(*rs->hits));

		if (!h)
			return SLUICE_ENOMEM;
		rs->hits = h;
		rs->hcap = t->cap;
	}
	for (i = 0; i < t->nmatches; i++) {
		int64_t k = sluice_keymap_get(rs->keys, t->matches[i].key,
					      t->matches[i].keylen, NULL);

		if (k < 0)
			return SLUICE_ENOMEM;
		rs->hits[i].key = (size_t)k;
	}
	/* The memory store answers before this returns. */
	rs->pass = 1;
	sluice_verdict_decide(&rs->be, t, now_us, on_verdict, rs);
	for (i = 0; i < t->nmatches; i++) {
		rs->hits[i].match = t->matches[i];
		rs->hits[i].rejected =
			t->results[i].outcome == SLUICE_OUT_LIMITED;
	}
	*hits = rs->hits;
	*nhits = t->nmatches;
	return rs->pass;
}
