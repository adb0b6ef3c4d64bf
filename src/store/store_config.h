/*
 * store_config.h -- which store a process decides on, and its settings
 * (the `store:` section of the config; parsed by the config code, read by
 * the store drivers, store.h).  Plain data: nothing here parses or opens.
 */
#ifndef SLUICE_STORE_CONFIG_H
#define SLUICE_STORE_CONFIG_H

#include <stddef.h>

/* SLUICE_STORE_MEMORY (0, a zeroed config's), SLUICE_STORE_SHARED (the
 * host's shared-memory store), SLUICE_STORE_REDIS, SLUICE_STORE_REDIS_CLUSTER:
 * one a row of store_kinds.def, which describes each. */
typedef enum {
#define SLUICE_STORE_KIND(id, ...) SLUICE_STORE_##id,
#include "store/store_kinds.def"
#undef SLUICE_STORE_KIND
} sluice_store_kind_t;

/* A kind as store_kinds.def describes it. */
typedef struct sluice_store_kind_info_s {
	sluice_store_kind_t kind;
	const char *name;     /* its key under store: in the config file */
	const char *log_name; /* how logs and messages call the store */
	/* ... when it follows a master through Sentinel (NULL: no such) */
	const char *sentinel_log_name;
	const char *const *keys; /* its keys in the config, NULL-terminated */
} sluice_store_kind_info_t;

/* kind's description (store.c); NULL for a value that is no kind. */
const sluice_store_kind_info_t *
sluice_store_kind_info(sluice_store_kind_t kind);

/* The description of the kind whose config key is name; NULL for none. */
const sluice_store_kind_info_t *sluice_store_kind_named(const char *name);

/* Every kind's config key, in store_kinds.def's order, NULL-terminated. */
const char *const *sluice_store_kind_names(void);

/* TLS towards Redis (store.redis.tls, store.redis_cluster.tls).  A
 * rediss:// URL or seed turns it on with the defaults; a `tls:` block
 * turns it on whatever the scheme.  The files were readable at load. */
typedef struct sluice_store_tls_s {
	int enabled;
	char *ca_file;	   /* NULL: the system's CA store */
	char *cert_file;   /* client certificate (mutual TLS), with key_file */
	char *key_file;	   /* its private key */
	char *server_name; /* SNI and the name verified; NULL: the host */
	int verify;	   /* default 1; 0 accepts any certificate */
} sluice_store_tls_t;

/* Redis Sentinel (store.redis.sentinel): master is NULL when none. */
typedef struct sluice_store_sentinel_s {
	char *master;  /* the name the Sentinels monitor */
	char **addrs;  /* "host:port" of each Sentinel */
	size_t naddrs; /* at least one */
	char *user;    /* AUTH to the Sentinels; NULL: none */
	char *password;
	int tls; /* Sentinels over TLS; default: as the master */
} sluice_store_sentinel_t;

/* The defaults of these fields (max_keys, key_prefix, timeout_ms,
 * connections, url) are util/defaults.h's SLUICE_DEFAULT_*. */
typedef struct sluice_store_config_s {
	sluice_store_kind_t kind;
	size_t max_keys; /* memory/shared store bound */
	char *shm_path;	 /* shared: the store's file, e.g. /dev/shm/sluice */
	char *shm_group; /* shared: the group sharing it, or NULL */
	/* redis / redis_cluster */
	/* redis[s]://[user:pass@]host:port/db, unix:///path; with a
	 * Sentinel only its credentials, db and scheme count (may be NULL) */
	char *url;
	/* cluster seeds, "host:port" or "redis[s]://host:port" */
	char **seeds;
	size_t nseeds;
	char *key_prefix;
	unsigned timeout_ms;
	unsigned connections; /* per thread */
	sluice_store_tls_t tls;
	sluice_store_sentinel_t sentinel; /* redis only */
	/* Not from the YAML (zero in sluice serve): set by a host that
	 * builds its config itself (the Node addon, from a Limiter's
	 * options).  SLUICE_REDIS_* flags for the Redis client
	 * (sluice_redis.h: script only, unref). */
	unsigned redis_flags;
} sluice_store_config_t;

#endif /* SLUICE_STORE_CONFIG_H */
