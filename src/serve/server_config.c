/*
 * server_config.c -- the config as `sluice serve` loads it (see
 * server_config.h).
 */
#include "serve/server_config.h"
#include "policy/envoy/config.h"
#include "util/listen_socket.h"
#include "util/log.h"
#include "xds/xds.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- configs */

/* Applies the command-line overrides to a freshly loaded config. */
static int apply_overrides(const sluice_serve_opts_t *opts,
			   sluice_config_t *cfg)
{
	if (opts->listen) {
		char *l = strdup(opts->listen);

		if (!l)
			return -1;
		free(cfg->listen);
		cfg->listen = l;
	}
	if (opts->grpc_listen) {
		char *l = strdup(opts->grpc_listen);

		if (!l)
			return -1;
		free(cfg->grpc.listen);
		cfg->grpc.listen = l;
	}
	if (opts->threads)
		cfg->threads = opts->threads;
	if (cfg->threads == 0)
		cfg->threads = 1;
	return 0;
}

/* envoy.xds: the domains are the control plane's resources (texts),
 * not a directory's; 0, or -1 with the resources' first error. */
static int xds_domains(sluice_config_t *cfg, const sluice_envoy_text_t *texts,
		       size_t n, char *err, size_t errlen)
{
	sluice_envoy_config_t *e;

	if (!cfg->envoy || !cfg->envoy->settings.xds)
		return 0;
	e = sluice_envoy_load_texts(texts, n, &cfg->envoy->settings, err,
				    errlen);
	if (!e)
		return -1;
	sluice_envoy_config_free(cfg->envoy);
	cfg->envoy = e;
	return 0;
}

sluice_config_t *sluice_serve_load_config(const sluice_serve_opts_t *opts,
					  const sluice_envoy_text_t *texts,
					  size_t n, char *err, size_t errlen)
{
	sluice_config_t *cfg;

	if (opts->config_path)
		cfg = sluice_config_load(opts->config_path, err, errlen);
	else if (!(cfg = sluice_config_default()))
		snprintf(err, errlen, "out of memory");
	if (cfg && apply_overrides(opts, cfg) < 0) {
		sluice_config_free(cfg);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (cfg && xds_domains(cfg, texts, n, err, errlen) < 0) {
		sluice_config_free(cfg);
		return NULL;
	}
	/* xDS TLS files that cannot be used refuse the start or the reload,
	 * as any config error does. */
	if (cfg &&
	    sluice_xds_check(cfg->envoy ? cfg->envoy->settings.xds : NULL, err,
			     errlen) < 0) {
		sluice_config_free(cfg);
		return NULL;
	}
	/* log: {format, level} from here on, the reload's own lines too
	 * (the first of them: what the envoy loader skipped). */
	if (cfg) {
		sluice_log_configure(cfg->log_json, cfg->log_level);
		sluice_envoy_log_skipped(cfg->envoy);
	}
	return cfg;
}

/* 1 when "HOST:PORT" binds a loopback address only. */
static int loopback(const char *addr)
{
	struct sockaddr_storage ss;
	char err[128];

	if (sluice_listen_parse(addr, &ss, err, sizeof(err)) < 0)
		return 0;
	if (ss.ss_family == AF_INET)
		return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >>
			24) == 127;
	if (ss.ss_family == AF_INET6) {
		const struct in6_addr *a =
			&((struct sockaddr_in6 *)&ss)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return 0;
}

/* The admin endpoints change limits: say so when anyone who can reach a
 * non-loopback address may try tokens on them.  `run` is the config whose
 * sockets are open (its listen and admin.listen). */
void sluice_serve_warn_admin_exposure(const sluice_config_t *cfg,
				      const sluice_config_t *run)
{
	const char *at = run->admin_listen ? run->admin_listen : run->listen;

	if (cfg->admin_token && !loopback(at))
		sluice_log_warn("admin endpoints (/v1/reset, /v1/refund) are "
				"served on %s, which is not a loopback "
				"address: anyone who reaches it can try "
				"tokens; give them admin.listen on 127.0.0.1 "
				"(or ::1)",
				at);
}
