/*
 * store_hooks.c -- what the stores say to their host (log, events,
 * per-node reports): the hooks the host sets once, read by every driver.
 */
#include "store/store.h"

/* ----------------------------------------------------------------- hooks */

static const sluice_store_hooks_t no_hooks;
static const sluice_store_hooks_t *hooks = &no_hooks;

void sluice_store_set_hooks(const sluice_store_hooks_t *h)
{
	hooks = h ? h : &no_hooks;
}

const sluice_store_hooks_t *sluice_store_hooks(void)
{
	return hooks;
}
