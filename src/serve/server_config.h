/*
 * server_config.h -- the config as `sluice serve` loads it: the file (or
 * the default), the command line's overrides, the xDS domains, and the
 * warnings about what it exposes.
 */
#ifndef SLUICE_SERVE_SERVER_CONFIG_H
#define SLUICE_SERVE_SERVER_CONFIG_H

#include "policy/config/config.h"
#include "policy/envoy/xds.h"
#include "serve/server.h"

/* The config at opts->config_path (or the default) with the command
 * line's overrides and, under envoy.xds, the n resources' domains; NULL
 * with err filled on any error. */
sluice_config_t *sluice_serve_load_config(const sluice_serve_opts_t *opts,
					  const sluice_envoy_text_t *texts,
					  size_t n, char *err, size_t errlen);

/* The admin endpoints change limits: warns when they are served on a
 * non-loopback address.  `run` is the config whose sockets are open. */
void sluice_serve_warn_admin_exposure(const sluice_config_t *cfg,
				      const sluice_config_t *run);

#endif
