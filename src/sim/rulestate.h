/*
 * rulestate.h -- a config's rules with bucket state, in simulated time.
 *
 * Both `sluice simulate --config` and `sluice replay` decide requests with
 * the verdict engine of `sluice serve` (policy/verdict.h) over a memory
 * store of the config's size, at the request's own time: the same rules
 * match, the same keys are charged all-or-nothing, shadow rules the same
 * way, so the answers are serve's by construction.  A keymap numbers the
 * store keys for per-key statistics.
 */
#ifndef SLUICE_SIM_RULESTATE_H
#define SLUICE_SIM_RULESTATE_H

#include "policy/verdict.h"
#include "sim/keymap.h"

/* One matching rule of one request. */
typedef struct sluice_rule_hit_s {
	sluice_match_t match; /* rule, limit set, store key */
	size_t key;	      /* index of match.key in the keymap */
	int rejected;	      /* this rule's buckets said no */
} sluice_rule_hit_t;

typedef struct sluice_rulestate_s {
	const sluice_config_t *cfg;
	sluice_keymap_t *keys;
	sluice_memstore_t *store;
	sluice_backend_t be;
	sluice_take_t *take;
	sluice_rule_hit_t *hits; /* the last request's */
	size_t hcap;
	int pass; /* the last verdict */
} sluice_rulestate_t;

/* Returns 0 or SLUICE_ENOMEM.  rs borrows cfg. */
int sluice_rulestate_init(sluice_rulestate_t *rs, const sluice_config_t *cfg);
void sluice_rulestate_free(sluice_rulestate_t *rs);

/*
 * Decides a request at now_us, charging the buckets when it passes.
 * Points *hits at every matching rule's hit (valid until the next call)
 * and sets *nhits.  Returns 1 pass, 0 rejected, or SLUICE_ENOMEM (nothing
 * charged).
 */
int sluice_rulestate_decide(sluice_rulestate_t *rs, const sluice_request_t *req,
			    int64_t now_us, const sluice_rule_hit_t **hits,
			    size_t *nhits);

#endif /* SLUICE_SIM_RULESTATE_H */
