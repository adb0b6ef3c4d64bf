/*
 * rulestate.h -- a config's rules with bucket state, in simulated time.
 *
 * Both `sluice simulate --config` and `sluice replay` decide requests the
 * way `sluice serve` would: sluice_rules_match() picks the rules, keys and
 * limit sets, sluice_eval_all() decides each bucket.  The states live here,
 * one per store key and limit, indexed through a keymap.
 *
 * As in `sluice serve`, several matching rules are all-or-nothing: the
 * request passes when no enforcing rule rejects it, and only then are the
 * enforcing rules' buckets charged.  A shadow rule is decided and charged
 * on its own and never rejects.
 */
#ifndef SLUICE_SIM_RULESTATE_H
#define SLUICE_SIM_RULESTATE_H

#include "serve/config.h"
#include "sim/keymap.h"

#define SLUICE_RULESTATE_MAX_HITS 16

/* One matching rule of one request. */
typedef struct sluice_rule_hit_s {
	sluice_match_t match; /* rule, limit set, store key */
	size_t key;	      /* index of match.key in the keymap */
	int rejected;	      /* this rule's buckets said no */
} sluice_rule_hit_t;

typedef struct sluice_rulestate_s {
	const sluice_config_t *cfg;
	sluice_keymap_t *keys;
	sluice_state_t *states; /* SLUICE_MAX_LIMITS per key */
	size_t cap;		/* keys the states array has room for */
	sluice_match_t *scratch;
	size_t nscratch;
} sluice_rulestate_t;

/* Returns 0 or SLUICE_ENOMEM.  rs borrows cfg. */
int sluice_rulestate_init(sluice_rulestate_t *rs, const sluice_config_t *cfg);
void sluice_rulestate_free(sluice_rulestate_t *rs);

/*
 * Decides a request at now_us and charges the buckets when it passes.
 * Writes up to SLUICE_RULESTATE_MAX_HITS hits and their count to *nhits.
 * Returns 1 pass, 0 rejected, or SLUICE_ENOMEM (nothing charged).
 */
int sluice_rulestate_decide(sluice_rulestate_t *rs, const sluice_request_t *req,
			    int64_t now_us, sluice_rule_hit_t *hits,
			    size_t *nhits);

#endif /* SLUICE_SIM_RULESTATE_H */
