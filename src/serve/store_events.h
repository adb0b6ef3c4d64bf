/*
 * store_events.h -- what the stores report, said in the server's log and
 * counted in its metrics: the hooks (store/store.h) `sluice serve` sets,
 * and the stores' own series on /metrics and /readyz.  The one place in
 * serve that knows the stores' report types (the Redis clients' events).
 */
#ifndef SLUICE_SERVE_STORE_EVENTS_H
#define SLUICE_SERVE_STORE_EVENTS_H

#include "store/store.h"

/* Sets the hooks (sluice_store_set_hooks) and the stores' part of
 * /metrics and /readyz (sluice_metrics_set_store); once, before any store
 * opens. */
void sluice_serve_store_events(void);

#endif /* SLUICE_SERVE_STORE_EVENTS_H */
