/*
 * live.h -- a loaded config as the serving threads share it.
 *
 * SIGHUP loads a new config on the main thread and hands every loop
 * thread a reference; each thread switches between two requests and drops
 * its reference to the old one.  A request whose decision is still in
 * flight (an asynchronous store) holds its own reference, so a config is
 * freed only after every thread and every request has moved on.  Requests
 * answered synchronously need no reference: the switch runs on the same
 * thread, between requests.
 */
#ifndef SLUICE_POLICY_LIVE_H
#define SLUICE_POLICY_LIVE_H

#include "policy/config/config.h"
#include "util/invariant.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct sluice_live_s {
	sluice_config_t *cfg;
	uint16_t *slots; /* metrics slot of each rule (metrics.h) */
	atomic_int refs;
} sluice_live_t;

/* Wraps cfg (taking ownership) with one reference.  NULL when out of
 * memory (cfg is then freed). */
sluice_live_t *sluice_live_new(sluice_config_t *cfg);
void sluice_live_ref(sluice_live_t *live);
void sluice_live_unref(sluice_live_t *live);

/* The index of `rule` within live->cfg->rules. */
static inline size_t sluice_live_rule_index(const sluice_live_t *live,
					    const sluice_rule_t *rule)
{
	SLUICE_ASSERT(rule >= live->cfg->rules &&
		      rule < live->cfg->rules + live->cfg->nrules);
	return (size_t)(rule - live->cfg->rules);
}

#endif /* SLUICE_POLICY_LIVE_H */
