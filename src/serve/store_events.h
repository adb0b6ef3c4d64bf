/*
 * store_events.h -- what the stores report, said in the server's log and
 * counted in its metrics: the hooks (store/store.h) `sluice serve` sets.
 */
#ifndef SLUICE_SERVE_STORE_EVENTS_H
#define SLUICE_SERVE_STORE_EVENTS_H

#include "store/store.h"

extern const sluice_store_hooks_t sluice_serve_store_hooks;

#endif /* SLUICE_SERVE_STORE_EVENTS_H */
