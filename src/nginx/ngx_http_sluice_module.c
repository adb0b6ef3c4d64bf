/*
 * ngx_http_sluice_module.c -- sluice's token buckets inside nginx: a
 * dynamic module whose directives mirror ngx_http_limit_req_module's,
 * so that a configuration converts by renaming limit_req to sluice_limit.
 *
 * This file: the directives' table (their reference, as nginx's own
 * modules' tables are) and the module's hooks; what the directives say
 * is ngx_http_sluice_conf.c, a request's decision
 * ngx_http_sluice_request.c, the stores ngx_http_sluice_store.c.
 */
#include "ngx_http_sluice.h"

static ngx_int_t ngx_http_sluice_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_sluice_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_sluice_init_module(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_sluice_init_worker(ngx_cycle_t *cycle);
static void ngx_http_sluice_exit_worker(ngx_cycle_t *cycle);

static ngx_conf_enum_t ngx_http_sluice_log_levels[] = {
	{ngx_string("info"), NGX_LOG_INFO},
	{ngx_string("notice"), NGX_LOG_NOTICE},
	{ngx_string("warn"), NGX_LOG_WARN},
	{ngx_string("error"), NGX_LOG_ERR},
	{ngx_null_string, 0}};

static ngx_conf_enum_t ngx_http_sluice_headers_modes[] = {
	{ngx_string("off"), NGX_HTTP_SLUICE_HEADERS_OFF},
	{ngx_string("on"), NGX_HTTP_SLUICE_HEADERS_ON},
	{ngx_string("legacy"), NGX_HTTP_SLUICE_HEADERS_LEGACY},
	{ngx_string("draft-11"), NGX_HTTP_SLUICE_HEADERS_DRAFT_11},
	{ngx_null_string, 0}};

static ngx_conf_num_bounds_t ngx_http_sluice_status_bounds = {
	ngx_conf_check_num_bounds, 400, 599};

/*
 * The directives (this table is their reference, as nginx's own modules'
 * are; docs/NGINX.md shows them with examples):
 *
 * sluice_limit_zone KEY zone=NAME:SIZE [rate=RATE] [store=STORE]
 *                   [fail=open|closed|local] [timeout=MS];  (http)
 *   As limit_req_zone.  KEY: any complex value ("$binary_remote_addr",
 *   "$http_x_user_id", "$a:$b"); a request whose key is empty is not
 *   limited by this zone.  SIZE: bytes (k, m suffixes) of buckets, 64
 *   bytes each, at least 32k.  RATE: nginx's "10r/s", "30r/m", or sluice's
 *   exact "2/s", "50/min", "1/3s", "7/day"; a zone without one holds
 *   calendar quotas (sluice_limit ... quota=).  STORE: none (the default) is
 *   a shared-memory file DIR/nginx-sluice-NAME (DIR: sluice_limit_store_dir)
 *   that every worker shares and a reload or a binary upgrade keeps;
 *   "shared:/PATH" a file of your choice (`sluice serve` with
 *   `store: {shared: {path: /PATH}}` shares its buckets: the zone NAME's
 *   key K is serve's rule NAME's identity K); a Redis store, shared by
 *   every nginx (and `sluice serve`) on it: "redis://[user:pass@]H:P[/db]",
 *   "rediss://..." (TLS), "unix:///PATH", "cluster:H:P,H:P..." (Redis
 *   Cluster seeds) or "sentinel://[user:pass@]H:P,H:P.../MASTER[/db]"
 *   ("sentinels://": TLS), each worker with one connection per node on
 *   its own event loop.  With a Redis store: fail=open|closed|local
 *   (default open) is what a request gets when Redis does not answer
 *   within timeout=MS (default 50): not limited by the zone, refused
 *   (sluice_limit_status), or decided on the worker's own in-memory
 *   buckets of the same limit.
 *
 * sluice_limit zone=NAME [burst=N] [nodelay | delay=N] [cost=N|$var];
 *   (http, server, location) As limit_req: capacity N + 1 at the zone's
 *   rate.  Without nodelay, a request over the rate waits until its exact
 *   turn (up to burst), one beyond burst is refused; delay=N lets the
 *   first N over the rate through at once (two-stage); nodelay lets all
 *   of burst through at once.  cost: tokens per request (a variable: a
 *   positive integer, else 1).  Several in one level: one all-or-nothing
 *   take per store (a refused request charges none); inherited from the
 *   level above when a level has none.
 *
 * sluice_limit zone=NAME quota=N/UNIT [tz=ZONE] [align=calendar|first_use]
 *              [cost=N|$var];  (http, server, location)
 *   A calendar quota on a zone declared without rate=: N requests per
 *   UNIT (second, minute, hour, day, week (from Monday), month, year),
 *   counted per key and window on the zone's store and refused at once
 *   past N until the window ends (no burst, no delay).  Windows follow
 *   the calendar of tz= (an IANA zone name; default UTC), or with
 *   align=first_use open at a key's first request and last one UNIT.
 *   Mixed with rate limits in one level, all-or-nothing as they are.
 *
 * sluice_limit_status CODE;        (default 503) as limit_req_status
 * sluice_limit_log_level LEVEL;    (default error) as limit_req_log_level;
 *                                  delays are logged one level lower
 * sluice_limit_dry_run on|off;     (default off) as limit_req_dry_run:
 *                                  buckets are charged, nothing is refused
 *                                  or delayed
 * sluice_limit_headers off|on|legacy|draft-11;  (default off) rate-limit
 *   header fields on answers the limits decided, allowed or refused: on
 *   sends what `sluice serve` sends (X-RateLimit-Limit/-Remaining/-Reset
 *   and draft-ietf-httpapi-ratelimit-headers-11's RateLimit-Policy and
 *   RateLimit), legacy the X-RateLimit-* ones, draft-11 the RateLimit
 *   ones; a refused answer adds Retry-After (and, with on or legacy,
 *   X-RateLimit-Retry-After-Ms).
 * sluice_limit_store_dir DIR;      (http; default /dev/shm) where the
 *                                  zones' own files go
 *
 * sluice_config FILE | off;        (http, server, location) the rules of
 *   a `sluice serve` YAML file decided by sluice's policy engine
 *   (ngx_http_sluice_config.c): tiers, overrides, composite keys, path
 *   rules, shadow rules, with $remote_addr (after realip) as the client
 *   address.  Its store: memory (a file under sluice_limit_store_dir,
 *   kept across reloads) or shared.  A refusal answers
 *   sluice_limit_status where set, else 429, with the headers
 *   sluice_limit_headers keeps, else all of serve's; with sluice_limit in
 *   the same location, a request is charged all or nothing.  Read again
 *   by a reload; an error names the YAML file and line.
 *
 * Variables: $sluice_limit_status (PASSED, DELAYED, REJECTED,
 * DELAYED_DRY_RUN, REJECTED_DRY_RUN), $sluice_limit_limit (capacity of
 * the limit reported), $sluice_limit_remaining (tokens left),
 * $sluice_limit_retry_after (seconds until a refused request could pass,
 * 0 when allowed), $sluice_limit_reset (seconds until the bucket is full).
 * They describe the zones' decision, else sluice_config's (PASSED,
 * REJECTED, REJECTED_DRY_RUN).
 */
static ngx_command_t ngx_http_sluice_commands[] = {

	{ngx_string("sluice_limit_zone"),
	 NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE2 | NGX_CONF_TAKE3 | NGX_CONF_TAKE4 |
		 NGX_CONF_TAKE5 | NGX_CONF_TAKE6,
	 ngx_http_sluice_zone_cmd, 0, 0, NULL},

	{ngx_string("sluice_limit"),
	 NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
		 NGX_CONF_1MORE,
	 ngx_http_sluice_limit_cmd, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},

	{ngx_string("sluice_limit_status"),
	 NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
		 NGX_CONF_TAKE1,
	 ngx_conf_set_num_slot, NGX_HTTP_LOC_CONF_OFFSET,
	 offsetof(ngx_http_sluice_loc_conf_t, status),
	 &ngx_http_sluice_status_bounds},

	{ngx_string("sluice_limit_log_level"),
	 NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
		 NGX_CONF_TAKE1,
	 ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET,
	 offsetof(ngx_http_sluice_loc_conf_t, log_level),
	 &ngx_http_sluice_log_levels},

	{ngx_string("sluice_limit_dry_run"),
	 NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
		 NGX_CONF_FLAG,
	 ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET,
	 offsetof(ngx_http_sluice_loc_conf_t, dry_run), NULL},

	{ngx_string("sluice_limit_headers"),
	 NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
		 NGX_CONF_TAKE1,
	 ngx_conf_set_enum_slot, NGX_HTTP_LOC_CONF_OFFSET,
	 offsetof(ngx_http_sluice_loc_conf_t, headers),
	 &ngx_http_sluice_headers_modes},

	{ngx_string("sluice_limit_store_dir"),
	 NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1, ngx_conf_set_str_slot,
	 NGX_HTTP_MAIN_CONF_OFFSET,
	 offsetof(ngx_http_sluice_main_conf_t, store_dir), NULL},

	{ngx_string("sluice_config"),
	 NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
		 NGX_CONF_TAKE1,
	 ngx_http_sluice_config_cmd, NGX_HTTP_LOC_CONF_OFFSET, 0, NULL},

	ngx_null_command};

static ngx_http_module_t ngx_http_sluice_module_ctx = {
	ngx_http_sluice_add_variables,	  /* preconfiguration */
	ngx_http_sluice_init,		  /* postconfiguration */
	ngx_http_sluice_create_main_conf, /* create main configuration */
	ngx_http_sluice_init_main_conf,	  /* init main configuration */
	NULL,				  /* create server configuration */
	NULL,				  /* merge server configuration */
	ngx_http_sluice_create_loc_conf,  /* create location configuration */
	ngx_http_sluice_merge_loc_conf	  /* merge location configuration */
};

ngx_module_t ngx_http_sluice_module = {
	NGX_MODULE_V1,
	&ngx_http_sluice_module_ctx, /* module context */
	ngx_http_sluice_commands,    /* module directives */
	NGX_HTTP_MODULE,	     /* module type */
	NULL,			     /* init master */
	ngx_http_sluice_init_module, /* init module */
	ngx_http_sluice_init_worker, /* init process */
	NULL,			     /* init thread */
	NULL,			     /* exit thread */
	ngx_http_sluice_exit_worker, /* exit process */
	NULL,			     /* exit master */
	NGX_MODULE_V1_PADDING};

/* ---------------------------------------------------------- variables */

static ngx_http_variable_t ngx_http_sluice_vars[] = {
	{ngx_string("sluice_limit_status"), NULL, ngx_http_sluice_variable,
	 NGX_HTTP_SLUICE_VAR_STATUS, NGX_HTTP_VAR_NOCACHEABLE, 0},
	{ngx_string("sluice_limit_limit"), NULL, ngx_http_sluice_variable,
	 NGX_HTTP_SLUICE_VAR_LIMIT, NGX_HTTP_VAR_NOCACHEABLE, 0},
	{ngx_string("sluice_limit_remaining"), NULL, ngx_http_sluice_variable,
	 NGX_HTTP_SLUICE_VAR_REMAINING, NGX_HTTP_VAR_NOCACHEABLE, 0},
	{ngx_string("sluice_limit_retry_after"), NULL, ngx_http_sluice_variable,
	 NGX_HTTP_SLUICE_VAR_RETRY_AFTER, NGX_HTTP_VAR_NOCACHEABLE, 0},
	{ngx_string("sluice_limit_reset"), NULL, ngx_http_sluice_variable,
	 NGX_HTTP_SLUICE_VAR_RESET, NGX_HTTP_VAR_NOCACHEABLE, 0},
	ngx_http_null_variable};

static ngx_int_t ngx_http_sluice_add_variables(ngx_conf_t *cf)
{
	ngx_http_variable_t *var, *v;

	for (v = ngx_http_sluice_vars; v->name.len; v++) {
		var = ngx_http_add_variable(cf, &v->name, v->flags);
		if (var == NULL)
			return NGX_ERROR;
		var->get_handler = v->get_handler;
		var->data = v->data;
	}
	return NGX_OK;
}

/* ---------------------------------------------------------------- hooks */

static ngx_int_t ngx_http_sluice_init(ngx_conf_t *cf)
{
	ngx_http_core_main_conf_t *cmcf;
	ngx_http_handler_pt *h;

	cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
	h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
	if (h == NULL)
		return NGX_ERROR;
	*h = ngx_http_sluice_handler;
	/* A phase's handlers run last pushed first: the file's rules decide
	 * before sluice_limit, which gives their tokens back if it refuses. */
	h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
	if (h == NULL)
		return NGX_ERROR;
	*h = ngx_http_sluice_config_handler;
	return NGX_OK;
}

ngx_http_sluice_main_conf_t *ngx_http_sluice_cycle_conf(ngx_cycle_t *cycle)
{
	if (ngx_get_conf(cycle->conf_ctx, ngx_http_module) == NULL)
		return NULL;
	return ngx_http_cycle_get_module_main_conf(cycle,
						   ngx_http_sluice_module);
}

/* In the master, before the workers are forked: every worker inherits
 * the stores' mappings. */
static ngx_int_t ngx_http_sluice_init_module(ngx_cycle_t *cycle)
{
	ngx_http_sluice_main_conf_t *smcf = ngx_http_sluice_cycle_conf(cycle);

	if (smcf == NULL)
		return NGX_OK;
	return ngx_http_sluice_stores_open(cycle, smcf);
}

/* In each worker: the stores that answer from the worker's own event
 * loop (Redis) open here, one client per worker; then the sluice_config
 * files' rules get their stores. */
static ngx_int_t ngx_http_sluice_init_worker(ngx_cycle_t *cycle)
{
	if (ngx_http_sluice_stores_worker_open(cycle) != NGX_OK)
		return NGX_ERROR;
	ngx_http_sluice_config_worker_open(cycle);
	return NGX_OK;
}

static void ngx_http_sluice_exit_worker(ngx_cycle_t *cycle)
{
	ngx_http_sluice_config_worker_close(cycle);
	ngx_http_sluice_stores_worker_close(cycle);
}
