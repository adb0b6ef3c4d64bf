/*
 * statsd.h -- envoy.statsd: the Envoy counts sent to a StatsD agent.
 */
#ifndef SLUICE_SERVE_STATSD_H
#define SLUICE_SERVE_STATSD_H

#include "policy/envoy/config.h"

/* Sends what counted since the last flush to s's statsd_addr (nothing
 * when s is NULL or has none).  The main loop's timer only. */
void sluice_statsd_flush(const sluice_envoy_settings_t *s);

#endif /* SLUICE_SERVE_STATSD_H */
