/*
 * ngx_http_sluice.h -- ngx_http_sluice_module's shared types: a zone
 * (sluice_limit_zone) and the store it decides on.
 *
 * The module is two files: ngx_http_sluice_module.c (the directives, the
 * request's decision in the preaccess phase, the variables and headers)
 * and ngx_http_sluice_store.c (opening each zone's store through the
 * store driver interface, store/store.h, and the seam where a store that
 * answers from an event loop, Redis, is given nginx's).
 */
#ifndef NGX_HTTP_SLUICE_H
#define NGX_HTTP_SLUICE_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "sluice.h"
#include "store/store.h"

/* Where a zone's shared-memory file goes when its store= names none:
 * DIR/nginx-sluice-NAME (sluice_limit_store_dir overrides DIR).  A tmpfs,
 * so the buckets stay in memory; a file, so they outlive the nginx that
 * made them (a reload, a binary upgrade). */
#define NGX_HTTP_SLUICE_STORE_DIR "/dev/shm"

/* One bucket takes 32 to 64 bytes of the file (sluice.h): a zone of SIZE
 * bytes holds SIZE / 64 buckets; the smallest zone nginx accepts for
 * limit_req (8 pages) is the smallest here too. */
#define NGX_HTTP_SLUICE_BUCKET_BYTES 64
#define NGX_HTTP_SLUICE_ZONE_MIN     (32 * 1024)

typedef struct ngx_http_sluice_zone_s ngx_http_sluice_zone_t;

/* One store, opened once in the master (init_module) and inherited by
 * the workers: zones naming the same store= share it, so a location's
 * limits on it are charged in one all-or-nothing take. */
typedef struct {
	sluice_store_config_t cfg;
	ngx_str_t shown; /* the store as messages print it (no password) */
	sluice_backend_t be;
	unsigned opened : 1;
} ngx_http_sluice_store_t;

struct ngx_http_sluice_zone_s {
	ngx_str_t name;
	ngx_http_complex_value_t key;
	sluice_rate_t rate;
	ngx_str_t rate_text; /* as written, for messages */
	size_t size;	     /* bytes, from zone=NAME:SIZE */
	ngx_http_sluice_store_t *store;
	u_char *conf_file; /* where it was declared */
	ngx_uint_t conf_line;
};

typedef struct {
	ngx_array_t zones;  /* ngx_http_sluice_zone_t */
	ngx_array_t stores; /* ngx_http_sluice_store_t * */
	ngx_str_t store_dir;
} ngx_http_sluice_main_conf_t;

/*
 * Parses a store= value into `store` (kind, path or URL) for zone `zone`:
 * "shared:PATH", "redis://...", "rediss://..."; an empty value is the
 * zone's default file under dir.  Returns NGX_CONF_OK or a message (with
 * any password masked) for nginx to print with the file and line.
 */
char *ngx_http_sluice_store_parse(ngx_conf_t *cf, ngx_http_sluice_zone_t *zone,
				  ngx_str_t *value, ngx_str_t *dir,
				  ngx_http_sluice_store_t *store);

/* Opens every store of the configuration in the master (the workers
 * inherit them), and closes them with the cycle. */
ngx_int_t ngx_http_sluice_stores_open(ngx_cycle_t *cycle,
				      ngx_http_sluice_main_conf_t *smcf);

/*
 * The seam for a store that answers from an event loop (Redis): opens
 * `store` for this worker on nginx's own loop.  Called in each worker
 * (init_process) for every store whose kind is Redis; the nginx loop
 * adapter of the Redis client plugs in here.  Returns NGX_OK or
 * NGX_ERROR (logged).
 */
ngx_int_t ngx_http_sluice_store_open_loop(ngx_http_sluice_store_t *store,
					  ngx_cycle_t *cycle);

#endif /* NGX_HTTP_SLUICE_H */
