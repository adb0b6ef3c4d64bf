/*
 * reload.c -- what a reload (SIGHUP) of a new config beside the
 * running one cannot apply: the sockets, threads and store are set up
 * once.  A config field that needs a restart is compared here, beside the
 * code that reads it.
 */
#include "policy/config/config.h"
#include "policy/envoy/config.h"
#include "util/log.h"

#include <stdio.h>
#include <string.h>

const char *sluice_config_store_name(const sluice_config_t *cfg)
{
	const sluice_store_kind_info_t *k =
		sluice_store_kind_info(cfg->store.kind);

	/* store_kinds.def's words; a kind no row has is not called one. */
	if (!k)
		return "unknown";
	return cfg->store.sentinel.master && k->sentinel_log_name
		       ? k->sentinel_log_name
		       : k->log_name;
}

static int str_same(const char *a, const char *b)
{
	return a && b ? strcmp(a, b) == 0 : a == b;
}

static int tls_same(const sluice_store_tls_t *a, const sluice_store_tls_t *b)
{
	return a->enabled == b->enabled && a->verify == b->verify &&
	       str_same(a->ca_file, b->ca_file) &&
	       str_same(a->cert_file, b->cert_file) &&
	       str_same(a->key_file, b->key_file) &&
	       str_same(a->server_name, b->server_name);
}

static int sentinel_same(const sluice_store_sentinel_t *a,
			 const sluice_store_sentinel_t *b)
{
	size_t i;

	if (!str_same(a->master, b->master) || a->naddrs != b->naddrs ||
	    !str_same(a->user, b->user) ||
	    !str_same(a->password, b->password) || a->tls != b->tls)
		return 0;
	for (i = 0; i < a->naddrs; i++)
		if (!str_same(a->addrs[i], b->addrs[i]))
			return 0;
	return 1;
}

int sluice_config_store_same(const sluice_store_config_t *a,
			     const sluice_store_config_t *b)
{
	size_t i;

	if (a->kind != b->kind || a->max_keys != b->max_keys ||
	    !str_same(a->url, b->url) || !str_same(a->shm_path, b->shm_path) ||
	    !str_same(a->shm_group, b->shm_group) || a->nseeds != b->nseeds ||
	    !str_same(a->key_prefix, b->key_prefix) ||
	    a->timeout_ms != b->timeout_ms ||
	    a->connections != b->connections || !tls_same(&a->tls, &b->tls) ||
	    !sentinel_same(&a->sentinel, &b->sentinel))
		return 0;
	for (i = 0; i < a->nseeds; i++)
		if (!str_same(a->seeds[i], b->seeds[i]))
			return 0;
	return 1;
}

const char *sluice_config_restart_fields(const sluice_config_t *cfg,
					 const sluice_config_t *run, char *buf,
					 size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	if (strcmp(cfg->listen, run->listen) != 0) {
		sluice_log_warn("SIGHUP: listen changed to %s: not applied, "
				"needs a restart; still listening on %s",
				cfg->listen, run->listen);
		n += (size_t)snprintf(buf + n, len - n, "listen");
	}
	if (!str_same(cfg->grpc.listen, run->grpc.listen)) {
		sluice_log_warn("SIGHUP: grpc.listen changed to %s: not "
				"applied, needs a restart; still %s",
				cfg->grpc.listen ? cfg->grpc.listen : "none",
				run->grpc.listen ? run->grpc.listen
						 : "without gRPC");
		n += (size_t)snprintf(buf + n, len - n, "%sgrpc.listen",
				      n ? ", " : "");
	}
	if (cfg->threads != run->threads) {
		sluice_log_warn("SIGHUP: threads changed to %u: not applied, "
				"needs a restart; still running %u",
				cfg->threads, run->threads);
		n += (size_t)snprintf(buf + n, len - n, "%sthreads",
				      n ? ", " : "");
	}
	if (!str_same(cfg->admin_listen, run->admin_listen)) {
		sluice_log_warn("SIGHUP: admin.listen changed: not applied, "
				"needs a restart");
		n += (size_t)snprintf(buf + n, len - n, "%sadmin.listen",
				      n ? ", " : "");
	}
	if (!sluice_config_store_same(&cfg->store, &run->store)) {
		/* Not the URL: it may hold a password. */
		sluice_log_warn("SIGHUP: store changed: not applied, needs a "
				"restart; still on the %s store it started "
				"with",
				sluice_config_store_name(run));
		snprintf(buf + n, len - n, "%sstore", n ? ", " : "");
	}
	return buf;
}
