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
	rs->nscratch = SLUICE_RULESTATE_MAX_HITS;
	rs->scratch = calloc(rs->nscratch, sizeof(*rs->scratch));
	if (!rs->keys || !rs->scratch) {
		sluice_rulestate_free(rs);
		return SLUICE_ENOMEM;
	}
	return 0;
}

void sluice_rulestate_free(sluice_rulestate_t *rs)
{
	sluice_keymap_free(rs->keys);
	free(rs->states);
	free(rs->scratch);
	memset(rs, 0, sizeof(*rs));
}

/* The keymap index of a store key, with room for its states. */
static int64_t key_slot(sluice_rulestate_t *rs, const sluice_match_t *m)
{
	int64_t i = sluice_keymap_get(rs->keys, m->key, m->keylen, NULL);

	if (i < 0)
		return SLUICE_ENOMEM;
	if ((size_t)i >= rs->cap) {
		size_t n = rs->cap ? rs->cap * 2 : 1024;
		sluice_state_t *s;

		while (n <= (size_t)i)
			n *= 2;
		s = realloc(rs->states, n * SLUICE_MAX_LIMITS * sizeof(*s));
		if (!s)
			return SLUICE_ENOMEM;
		/* 0 is the full bucket. */
		memset(s + rs->cap * SLUICE_MAX_LIMITS, 0,
		       (n - rs->cap) * SLUICE_MAX_LIMITS * sizeof(*s));
		rs->states = s;
		rs->cap = n;
	}
	return i;
}

int sluice_rulestate_decide(sluice_rulestate_t *rs, const sluice_request_t *req,
			    int64_t now_us, sluice_rule_hit_t *hits,
			    size_t *nhits)
{
	sluice_state_t next[SLUICE_RULESTATE_MAX_HITS][SLUICE_MAX_LIMITS];
	sluice_decision_t dec[SLUICE_MAX_LIMITS];
	size_t n, i;
	int pass = 1;

	n = sluice_rules_match(rs->cfg, req, rs->scratch, rs->nscratch);
	*nhits = 0;
	/* Look every key up first: the states array may move meanwhile. */
	for (i = 0; i < n; i++) {
		int64_t k = key_slot(rs, &rs->scratch[i]);

		if (k < 0)
			return SLUICE_ENOMEM;
		hits[i].match = rs->scratch[i];
		hits[i].key = (size_t)k;
	}
	for (i = 0; i < n; i++) {
		const sluice_match_t *m = &hits[i].match;
		sluice_state_t *st =
			rs->states + hits[i].key * SLUICE_MAX_LIMITS;

		hits[i].rejected = !sluice_eval_all(
			m->set->limits, st, m->set->nlimits, now_us,
			m->rule->cost, next[i], dec, NULL);
		if (hits[i].rejected && !m->rule->shadow)
			pass = 0;
	}
	/* Shadow rules are charged on their own; enforcing ones only when
	 * every enforcing rule passes.  A rejected set's next[] equals its
	 * state, so copying it is harmless. */
	for (i = 0; i < n; i++)
		if (pass || hits[i].match.rule->shadow)
			memcpy(rs->states + hits[i].key * SLUICE_MAX_LIMITS,
			       next[i],
			       hits[i].match.set->nlimits * sizeof(**next));
	*nhits = n;
	return pass;
}
