/*
 * ngx_http_sluice.h -- ngx_http_sluice_module's shared types: a zone
 * (sluice_limit_zone) and the store it decides on.
 *
 * The module: ngx_http_sluice_module.c (the directives' table, which is
 * their reference, and the module's hooks), ngx_http_sluice_conf.c (what
 * the directives say), ngx_http_sluice_request.c (a request's decision
 * in the preaccess phase, its delay, variables and headers) and
 * ngx_http_sluice_store.c (opening each zone's store through the store
 * driver interface, store/store.h: the shared-memory ones in the master,
 * the Redis ones in each worker on nginx's event loop, which
 * ngx_sluice_loop.c gives the Redis client), and
 * ngx_http_sluice_config.c (sluice_config: a `sluice serve` rules file
 * decided by the policy engine, src/policy).
 */
#ifndef NGX_HTTP_SLUICE_H
#define NGX_HTTP_SLUICE_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "policy/request.h"
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
	ngx_str_t text;	 /* store= as written: zones with the same share it */
	sluice_backend_t be;
	/* A Redis store, in each worker: the zones' fail=local buckets
	 * (this worker's own, in memory, sized by the store's zones). */
	sluice_backend_t local;
	ngx_uint_t timeout_ms; /* timeout=, NGX_CONF_UNSET_UINT: not given */
	u_char *timeout_file;  /* where timeout= was given, for messages */
	ngx_uint_t timeout_line;
	unsigned opened : 1;
	unsigned local_opened : 1;
} ngx_http_sluice_store_t;

/* fail= of a zone on a Redis store: what a request gets when the store
 * cannot answer within timeout= (as sluice serve's on_store_error). */
enum {
	NGX_HTTP_SLUICE_FAIL_OPEN = 0, /* not limited by this zone */
	NGX_HTTP_SLUICE_FAIL_CLOSED,   /* refused (sluice_limit_status) */
	NGX_HTTP_SLUICE_FAIL_LOCAL,    /* decided on the worker's own buckets */
};

struct ngx_http_sluice_zone_s {
	ngx_str_t name;
	ngx_http_complex_value_t key;
	sluice_rate_t rate;
	ngx_str_t rate_text; /* as written, for messages */
	size_t size;	     /* bytes, from zone=NAME:SIZE */
	ngx_http_sluice_store_t *store;
	ngx_uint_t fail;   /* NGX_HTTP_SLUICE_FAIL_* */
	u_char *conf_file; /* where it was declared */
	ngx_uint_t conf_line;
};

/* One file named by sluice_config: loaded once per configuration
 * however many levels name it, with the store its rules decide on. */
typedef struct {
	ngx_str_t file;		     /* the full path, NUL-terminated */
	struct sluice_config_s *cfg; /* the engine's (policy/config/config.h) */
	ngx_http_sluice_store_t *store;
	/* What sluice_decide_request() decides with (policy/request.h): the
	 * config, as nginx's reload replaces it (a new policy, never a swap),
	 * and the worker's context: the store's backend and the worker's
	 * spare take (init_process), no counters. */
	sluice_live_t live;
	sluice_svc_t svc;
} ngx_http_sluice_policy_t;

typedef struct {
	ngx_array_t zones;  /* ngx_http_sluice_zone_t */
	ngx_array_t stores; /* ngx_http_sluice_store_t * */
	ngx_str_t store_dir;
	ngx_array_t policies; /* ngx_http_sluice_policy_t * (sluice_config) */
} ngx_http_sluice_main_conf_t;

/* $sluice_limit_status, as $limit_req_status. */
enum {
	NGX_HTTP_SLUICE_NONE = 0,
	NGX_HTTP_SLUICE_PASSED,
	NGX_HTTP_SLUICE_DELAYED,
	NGX_HTTP_SLUICE_REJECTED,
	NGX_HTTP_SLUICE_DELAYED_DRY_RUN,
	NGX_HTTP_SLUICE_REJECTED_DRY_RUN
};

/* sluice_limit_headers */
/* sluice_limit_headers */
enum {
	NGX_HTTP_SLUICE_HEADERS_OFF = 0,
	NGX_HTTP_SLUICE_HEADERS_ON,	/* both vocabularies, as sluice serve */
	NGX_HTTP_SLUICE_HEADERS_LEGACY, /* X-RateLimit-* */
	NGX_HTTP_SLUICE_HEADERS_DRAFT_11, /* RateLimit-Policy, RateLimit */
};

/* One sluice_limit directive. */
/* One sluice_limit directive. */
typedef struct {
	ngx_http_sluice_zone_t *zone;
	sluice_limit_t limit; /* capacity burst + 1, the zone's rate */
	ngx_uint_t delay;     /* requests over the rate that pass at once */
	ngx_uint_t cost;
	ngx_http_complex_value_t *cost_cv; /* cost=$var, else NULL */
	unsigned nodelay : 1;
} ngx_http_sluice_limit_t;

typedef struct {
	ngx_array_t *limits; /* ngx_http_sluice_limit_t; NULL: inherited */
	ngx_uint_t status;
	ngx_uint_t log_level;
	ngx_uint_t delay_log_level;
	ngx_flag_t dry_run;
	ngx_uint_t headers;
	/* sluice_config: NULL inherits, &ngx_http_sluice_policy_off is
	 * "off"; its refusals' status and headers are sluice_limit_status
	 * and sluice_limit_headers where a level sets them, else what
	 * `sluice serve` answers (429, on), worked out at merge: raw_* are
	 * the values set at this level or above (unset: none), the others
	 * the defaults of sluice_limit (503, off). */
	ngx_http_sluice_policy_t *policy;
	ngx_uint_t policy_status;
	ngx_uint_t policy_headers;
	ngx_uint_t raw_status;
	ngx_uint_t raw_headers;
	unsigned merged : 1;
} ngx_http_sluice_loc_conf_t;

extern ngx_module_t ngx_http_sluice_module;

/* The directives' handlers and the configurations (ngx_http_sluice_conf.c). */
void *ngx_http_sluice_create_main_conf(ngx_conf_t *cf);
char *ngx_http_sluice_init_main_conf(ngx_conf_t *cf, void *conf);
void *ngx_http_sluice_create_loc_conf(ngx_conf_t *cf);
char *ngx_http_sluice_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child);
char *ngx_http_sluice_zone_cmd(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);
char *ngx_http_sluice_limit_cmd(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);

/* The request's decision (ngx_http_sluice_request.c): the preaccess
 * phase's handler, and the variables' getter (data: NGX_HTTP_SLUICE_VAR_*). */
ngx_int_t ngx_http_sluice_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_sluice_variable(ngx_http_request_t *r,
				   ngx_http_variable_value_t *v,
				   uintptr_t data);
enum {
	NGX_HTTP_SLUICE_VAR_STATUS,
	NGX_HTTP_SLUICE_VAR_LIMIT,
	NGX_HTTP_SLUICE_VAR_REMAINING,
	NGX_HTTP_SLUICE_VAR_RETRY_AFTER,
	NGX_HTTP_SLUICE_VAR_RESET,
};

/*
 * Parses a store= value into `store` (kind, path or URL) for zone `zone`:
 * "shared:PATH", "redis://...", "rediss://..."; an empty value is the
 * zone's default file under dir.  Returns NGX_CONF_OK or a message (with
 * any password masked) for nginx to print with the file and line.
 */
char *ngx_http_sluice_store_parse(ngx_conf_t *cf, ngx_http_sluice_zone_t *zone,
				  ngx_str_t *value, ngx_str_t *dir,
				  ngx_http_sluice_store_t *store);

/* Parses a zone's fail= and timeout= (store options, refused on a store
 * other than Redis).  NGX_CONF_OK or a message. */
char *ngx_http_sluice_store_option(ngx_conf_t *cf, ngx_http_sluice_zone_t *zone,
				   ngx_str_t *value);

/* The module's main configuration of a cycle; NULL when it has no http
 * block.  (ngx_http_sluice_module.c) */
ngx_http_sluice_main_conf_t *ngx_http_sluice_cycle_conf(ngx_cycle_t *cycle);

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

/* The worker's side of the stores (init_process, exit_process): opens
 * every Redis store on nginx's loop, and closes them when it exits. */
ngx_int_t ngx_http_sluice_stores_worker_open(ngx_cycle_t *cycle);
void ngx_http_sluice_stores_worker_close(ngx_cycle_t *cycle);
/* Set by stores_worker_close (ngx_http_sluice_request.c): calls failed
 * then leave their requests alone. */
extern ngx_uint_t ngx_http_sluice_exiting;

/* nginx's event loop as the Redis client's (ngx_sluice_loop.c): a table
 * of sluice_loop.h over nginx's events, timers and posted events; freed
 * once no client uses it (its close notices still waiting are delivered
 * first). */
sluice_loop_t *ngx_sluice_loop_new(ngx_log_t *log);
void ngx_sluice_loop_free(sluice_loop_t *loop);

/* ------------------------------------------------- sluice_config FILE */

/* (ngx_http_sluice_config.c) */
extern ngx_http_sluice_policy_t ngx_http_sluice_policy_off;

char *ngx_http_sluice_config_cmd(ngx_conf_t *cf, ngx_command_t *cmd,
				 void *conf);
/* Gives the files' memory stores their paths (init_main_conf), once
 * sluice_limit_store_dir is known. */
char *ngx_http_sluice_config_init_main(ngx_conf_t *cf,
				       ngx_http_sluice_main_conf_t *smcf);
/* Inherits sluice_config and works out the status and headers of its
 * refusals (merge_loc_conf, before the defaults are applied). */
void ngx_http_sluice_config_merge(ngx_http_sluice_loc_conf_t *conf,
				  ngx_http_sluice_loc_conf_t *prev);
/* The worker's side of the files (init_process, exit_process): each
 * file's rules decide on its store with a spare take of the worker's. */
void ngx_http_sluice_config_worker_open(ngx_cycle_t *cycle);
void ngx_http_sluice_config_worker_close(ngx_cycle_t *cycle);
/* The preaccess handler deciding a request by the file's rules; it runs
 * before sluice_limit's (ngx_http_sluice_handler). */
ngx_int_t ngx_http_sluice_config_handler(ngx_http_request_t *r);
/*
 * sluice_limit refused the request (or its store failed) after the file's
 * rules allowed it: a request is charged all or nothing, so the rules'
 * buckets get their tokens back and their headers are withdrawn.
 */
void ngx_http_sluice_config_refund(ngx_http_request_t *r);
/*
 * sluice_limit allowed the request with decision d and sends headers: 1
 * when the file's rules reported a more restrictive decision (theirs stay
 * and sluice_limit sends none), else 0 (theirs are withdrawn).  One
 * answer reports one decision, the most restrictive, as sluice serve's do.
 */
ngx_int_t ngx_http_sluice_config_outranks(ngx_http_request_t *r,
					  const sluice_decision_t *d);

/* The decision of the file's rules for the variables: 1 with the status
 * (NGX_HTTP_SLUICE_PASSED, _REJECTED, _REJECTED_DRY_RUN), the decision
 * reported and the wait a refusal asks for; 0 when no rule decided. */
ngx_int_t ngx_http_sluice_config_decision(ngx_http_request_t *r,
					  ngx_uint_t *status,
					  sluice_decision_t *d,
					  uint64_t *retry_us);

/* Adds the header lines of buf ("Name: value\r\n" each) to the answer,
 * those the sluice_limit_headers mode keeps; each field added is stored in
 * added[] (up to max) and counted in *nadded (both may be NULL).
 * (ngx_http_sluice_request.c) */
ngx_int_t ngx_http_sluice_header_lines(ngx_http_request_t *r, ngx_uint_t mode,
				       const char *buf, size_t len,
				       ngx_table_elt_t **added, ngx_uint_t max,
				       ngx_uint_t *nadded);

#endif /* NGX_HTTP_SLUICE_H */
