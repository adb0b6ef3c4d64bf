/*
 * live.c -- reference-counted configs.
 */
#include "policy/live.h"
#include "policy/counters.h"
#include "util/invariant.h"

#include <stdlib.h>

sluice_live_t *sluice_live_new(sluice_config_t *cfg)
{
	sluice_live_t *live = calloc(1, sizeof(*live));
	size_t i;

	if (!live ||
	    !(live->slots = calloc(cfg->nrules + 1, sizeof(*live->slots)))) {
		free(live);
		sluice_config_free(cfg);
		return NULL;
	}
	live->cfg = cfg;
	for (i = 0; i < cfg->nrules; i++)
		live->slots[i] = sluice_metrics_slot(cfg->rules[i].name);
	atomic_init(&live->refs, 1);
	return live;
}

void sluice_live_ref(sluice_live_t *live)
{
	/* Only a holder takes another reference: never from 0 (freed). */
	int was =
		atomic_fetch_add_explicit(&live->refs, 1, memory_order_relaxed);

	SLUICE_ASSERT(was > 0);
}

void sluice_live_unref(sluice_live_t *live)
{
	if (!live)
		return;
	int was =
		atomic_fetch_sub_explicit(&live->refs, 1, memory_order_acq_rel);

	SLUICE_ASSERT(was > 0); /* one unref per reference */
	if (was != 1)
		return;
	sluice_config_free(live->cfg);
	free(live->slots);
	free(live);
}
