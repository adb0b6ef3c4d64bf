/*
 * ngx_http_sluice_module.c -- sluice's token buckets inside nginx: a
 * dynamic module whose directives mirror ngx_http_limit_req_module's,
 * so that a configuration converts by renaming limit_req to sluice_limit.
 *
 * A request is decided in the preaccess phase, where limit_req decides
 * it.  Each sluice_limit of its location is one item (the zone's key,
 * one limit: capacity burst + 1 at the zone's rate, the cost) of a take
 * through the store driver interface (store/store.h); the items of one
 * store go in one all-or-nothing take, so a refused request charges
 * none of a location's limits.  A take answers through a callback: the
 * local stores call it before take() returns, a store with a loop of its
 * own later, when the handler has returned NGX_DONE with the request
 * held (r->main->count) and the callback runs the phases again.
 *
 * The bucket is GCRA's: after a take, reset_after is how far its
 * theoretical arrival time lies ahead.  A request that passes is delayed
 * (a timer on the connection's write event, never a blocked worker)
 * until its exact turn: reset_after minus the time the first delay + cost
 * tokens take to refill, which is limit_req's excess / rate for the same
 * burst and delay.
 */
#include "ngx_http_sluice.h"

#include "policy/ratelimit_headers.h"
#include "util/buf.h"

#include <string.h>

/* $sluice_limit_status, as $limit_req_status. */
enum {
	NGX_HTTP_SLUICE_NONE = 0,
	NGX_HTTP_SLUICE_PASSED,
	NGX_HTTP_SLUICE_DELAYED,
	NGX_HTTP_SLUICE_REJECTED,
	NGX_HTTP_SLUICE_DELAYED_DRY_RUN,
	NGX_HTTP_SLUICE_REJECTED_DRY_RUN
};

static ngx_str_t ngx_http_sluice_status_text[] = {
	ngx_null_string,
	ngx_string("PASSED"),
	ngx_string("DELAYED"),
	ngx_string("REJECTED"),
	ngx_string("DELAYED_DRY_RUN"),
	ngx_string("REJECTED_DRY_RUN"),
};

/* sluice_limit_headers */
enum {
	NGX_HTTP_SLUICE_HEADERS_OFF = 0,
	NGX_HTTP_SLUICE_HEADERS_ON,	/* both vocabularies, as sluice serve */
	NGX_HTTP_SLUICE_HEADERS_LEGACY, /* X-RateLimit-* */
	NGX_HTTP_SLUICE_HEADERS_DRAFT_11, /* RateLimit-Policy, RateLimit */
};

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
} ngx_http_sluice_loc_conf_t;

/* A request's decision, kept for the variables and the headers. */
typedef struct {
	ngx_http_request_t *r;
	sluice_take_item_t items[SLUICE_MAX_LIMITS];
	ngx_http_sluice_limit_t *lim[SLUICE_MAX_LIMITS];
	ngx_uint_t n;	      /* items */
	ngx_uint_t next;      /* items[0, next) are charged */
	ngx_uint_t stage_end; /* the take under way: items[next, stage_end) */
	ngx_int_t error;      /* a store's negative code, else 0 */
	ngx_uint_t status;    /* NGX_HTTP_SLUICE_* */
	sluice_decision_t d;  /* the most restrictive decision */
	ngx_uint_t which;     /* its item */
	unsigned decided : 1;
	unsigned rejected : 1;
	unsigned called : 1;  /* the take's callback has run */
	unsigned pending : 1; /* the handler returned NGX_DONE for it */
} ngx_http_sluice_ctx_t;

static ngx_int_t ngx_http_sluice_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_sluice_init(ngx_conf_t *cf);
static void *ngx_http_sluice_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_sluice_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_sluice_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_sluice_merge_loc_conf(ngx_conf_t *cf, void *parent,
					    void *child);
static char *ngx_http_sluice_zone_cmd(ngx_conf_t *cf, ngx_command_t *cmd,
				      void *conf);
static char *ngx_http_sluice_limit_cmd(ngx_conf_t *cf, ngx_command_t *cmd,
				       void *conf);
static ngx_int_t ngx_http_sluice_init_module(ngx_cycle_t *cycle);

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
 * sluice_limit_zone KEY zone=NAME:SIZE rate=RATE [store=STORE];  (http)
 *   As limit_req_zone.  KEY: any complex value ("$binary_remote_addr",
 *   "$http_x_user_id", "$a:$b"); a request whose key is empty is not
 *   limited by this zone.  SIZE: bytes (k, m suffixes) of buckets, 64
 *   bytes each, at least 32k.  RATE: nginx's "10r/s", "30r/m", or sluice's
 *   exact "2/s", "50/min", "1/3s", "7/day".  STORE: none (the default) is
 *   a shared-memory file DIR/nginx-sluice-NAME (DIR: sluice_limit_store_dir)
 *   that every worker shares and a reload or a binary upgrade keeps;
 *   "shared:/PATH" a file of your choice (`sluice serve` with
 *   `store: {shared: {path: /PATH}}` shares its buckets: the zone NAME's
 *   key K is serve's rule NAME's identity K); "redis://..." and
 *   "rediss://..." are recognised and refused until the Redis client has
 *   its nginx loop adapter.
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
 * Variables: $sluice_limit_status (PASSED, DELAYED, REJECTED,
 * DELAYED_DRY_RUN, REJECTED_DRY_RUN), $sluice_limit_limit (capacity of
 * the limit reported), $sluice_limit_remaining (tokens left),
 * $sluice_limit_retry_after (seconds until a refused request could pass,
 * 0 when allowed), $sluice_limit_reset (seconds until the bucket is full).
 */
static ngx_command_t ngx_http_sluice_commands[] = {

	{ngx_string("sluice_limit_zone"),
	 NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE3 | NGX_CONF_TAKE4,
	 ngx_http_sluice_zone_cmd, 0, 0, NULL},

	{ngx_string("sluice_limit"),
	 NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
		 NGX_CONF_TAKE1234,
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
	NULL,			     /* init process */
	NULL,			     /* init thread */
	NULL,			     /* exit thread */
	NULL,			     /* exit process */
	NULL,			     /* exit master */
	NGX_MODULE_V1_PADDING};

/* ------------------------------------------------------------ headers */

/* Adds one "Name: value" header field to the answer. */
static ngx_int_t add_header(ngx_http_request_t *r, const char *line, size_t len)
{
	const char *colon = memchr(line, ':', len);
	ngx_table_elt_t *h;
	size_t nlen;

	if (colon == NULL)
		return NGX_OK;
	nlen = (size_t)(colon - line);
	h = ngx_list_push(&r->headers_out.headers);
	if (h == NULL)
		return NGX_ERROR;
	h->hash = 1;
	h->key.len = nlen;
	h->key.data = ngx_pnalloc(r->pool, len);
	if (h->key.data == NULL)
		return NGX_ERROR;
	ngx_memcpy(h->key.data, line, len);
	h->value.data = h->key.data + nlen + 2;
	h->value.len = len - nlen - 2;
	return NGX_OK;
}

/* The decision's header fields, composed by the same code as sluice
 * serve's (policy/ratelimit_headers.c) and kept by the mode. */
static ngx_int_t send_headers(ngx_http_request_t *r, ngx_uint_t mode,
			      ngx_http_sluice_ctx_t *ctx, int limited)
{
	ngx_http_sluice_limit_t *lim = ctx->lim[ctx->which];
	char name[SLUICE_KEY_NAME_MAX + 1];
	sluice_buf_t buf = {0};
	const char *p, *end, *eol;
	ngx_int_t rc = NGX_OK;
	int keep;

	ngx_memcpy(name, lim->zone->name.data, lim->zone->name.len);
	name[lim->zone->name.len] = '\0';
	sluice_ratelimit_headers(&buf, name, &lim->limit, &ctx->d, limited);
	if (buf.oom) {
		sluice_buf_free(&buf);
		return NGX_ERROR;
	}
	for (p = buf.data, end = buf.data + buf.len; p < end; p = eol + 2) {
		eol = memchr(p, '\r', (size_t)(end - p));
		if (eol == NULL)
			break;
		if (p[0] == 'X')
			keep = mode != NGX_HTTP_SLUICE_HEADERS_DRAFT_11;
		else if (p[0] == 'R' && p[1] == 'a')
			keep = mode != NGX_HTTP_SLUICE_HEADERS_LEGACY;
		else
			keep = 1; /* Retry-After */
		if (keep && add_header(r, p, (size_t)(eol - p)) != NGX_OK) {
			rc = NGX_ERROR;
			break;
		}
	}
	sluice_buf_free(&buf);
	return rc;
}

/* ----------------------------------------------------------- decision */

static void take_done(void *arg, int status, int allowed);

/* Takes the items not yet charged, one store at a time (each store's
 * items in one all-or-nothing take).  NGX_OK: decided; NGX_AGAIN: a
 * store answers later (take_done resumes the request). */
static ngx_int_t take_stages(ngx_http_sluice_ctx_t *ctx)
{
	ngx_http_sluice_store_t *store;
	ngx_uint_t end;
	int rc;

	while (!ctx->rejected && !ctx->error && ctx->next < ctx->n) {
		store = ctx->lim[ctx->next]->zone->store;
		for (end = ctx->next + 1;
		     end < ctx->n && ctx->lim[end]->zone->store == store; end++)
			;
		ctx->stage_end = end;
		ctx->called = 0;
		rc = store->be.ops->take(store->be.impl, &ctx->items[ctx->next],
					 end - ctx->next, sluice_now_us(),
					 take_done, ctx);
		if (rc < 0) {
			ctx->error = rc;
			break;
		}
		if (!ctx->called) {
			ctx->pending = 1;
			return NGX_AGAIN;
		}
	}
	return NGX_OK;
}

static void take_done(void *arg, int status, int allowed)
{
	ngx_http_sluice_ctx_t *ctx = arg;
	ngx_http_request_t *r = ctx->r;
	ngx_connection_t *c;

	ctx->called = 1;
	if (status < 0)
		ctx->error = status;
	else if (!allowed)
		ctx->rejected = 1;
	else
		ctx->next = ctx->stage_end;
	if (!ctx->pending)
		return; /* answered inside take(): the handler goes on */

	/* Answered from the loop: give back the hold the handler took and
	 * run the phases again, which comes back to the handler. */
	ctx->pending = 0;
	c = r->connection;
	if (c->error) {
		ngx_http_finalize_request(r, NGX_DONE);
		return;
	}
	r->main->count--;
	r->write_event_handler = ngx_http_core_run_phases;
	ngx_http_core_run_phases(r);
	ngx_http_run_posted_requests(c);
}

static void refund_done(void *arg, int status, int allowed)
{
}

/* A refused request charges nothing: the stores that had charged it
 * (those before the one that refused) give the cost back. */
static void refund_taken(ngx_http_sluice_ctx_t *ctx)
{
	ngx_http_sluice_store_t *store;
	ngx_uint_t i, end;

	for (i = 0; i < ctx->next; i = end) {
		store = ctx->lim[i]->zone->store;
		for (end = i + 1;
		     end < ctx->next && ctx->lim[end]->zone->store == store;
		     end++)
			;
		/* The local stores answer inside refund(); a store that
		 * answers later must copy what it borrows (the items live
		 * in the request). */
		(void)store->be.ops->refund(store->be.impl, &ctx->items[i],
					    end - i, sluice_now_us(),
					    refund_done, NULL);
	}
}

/* The request's cost for one limit: the constant, or the variable's
 * value when it is a positive integer (else 1, so a client that sets it
 * to 0 or garbage still pays). */
static uint64_t request_cost(ngx_http_request_t *r,
			     ngx_http_sluice_limit_t *lim)
{
	ngx_str_t v;
	ngx_int_t n;

	if (lim->cost_cv == NULL)
		return lim->cost;
	if (ngx_http_complex_value(r, lim->cost_cv, &v) != NGX_OK)
		return 1;
	n = ngx_atoi(v.data, v.len);
	return n > 0 ? (uint64_t)n : 1;
}

/* Builds the request's items, each store's together in directive order.
 * NGX_DECLINED: no limit applies (every key empty). */
static ngx_int_t build_items(ngx_http_request_t *r,
			     ngx_http_sluice_loc_conf_t *lcf,
			     ngx_http_sluice_ctx_t *ctx)
{
	ngx_http_sluice_limit_t *limits = lcf->limits->elts;
	ngx_http_sluice_limit_t *order[SLUICE_MAX_LIMITS];
	char keybuf[SLUICE_KEY_MAX];
	ngx_uint_t i, j, n = 0, done[SLUICE_MAX_LIMITS] = {0};
	ngx_str_t key[SLUICE_MAX_LIMITS];
	ngx_uint_t from[SLUICE_MAX_LIMITS];
	const void *part;
	size_t len;
	u_char *k;

	for (i = 0; i < lcf->limits->nelts; i++) {
		if (ngx_http_complex_value(r, &limits[i].zone->key, &key[n]) !=
		    NGX_OK)
			return NGX_ERROR;
		if (key[n].len == 0)
			continue; /* as limit_req: not limited by this zone */
		order[n] = &limits[i];
		from[n] = i;
		n++;
	}
	if (n == 0)
		return NGX_DECLINED;

	/* Group by store, keeping the directives' order inside each. */
	ctx->n = 0;
	for (i = 0; i < n; i++) {
		if (done[i])
			continue;
		for (j = i; j < n; j++) {
			sluice_take_item_t *it;

			if (done[j] ||
			    order[j]->zone->store != order[i]->zone->store)
				continue;
			done[j] = 1;
			part = key[j].data;
			len = key[j].len;
			len = sluice_key_make(
				(const char *)order[j]->zone->name.data, &part,
				&len, 1, keybuf);
			k = ngx_pnalloc(r->pool, len);
			if (k == NULL)
				return NGX_ERROR;
			ngx_memcpy(k, keybuf, len);
			it = &ctx->items[ctx->n];
			it->key = k;
			it->keylen = len;
			it->limits = &order[j]->limit;
			it->nlimits = 1;
			it->cost = request_cost(r, order[j]);
			ctx->lim[ctx->n++] = order[j];
		}
	}
	(void)from;
	return NGX_OK;
}

/* The wait before a request that passed may go on, in microseconds: for
 * each limit with a delay, how far its bucket's theoretical arrival time
 * lies beyond what delay + cost tokens cover (limit_req's
 * (excess - delay) / rate); the longest of them. */
static uint64_t request_delay(ngx_http_sluice_ctx_t *ctx, ngx_uint_t *which)
{
	uint64_t best = 0, cover, delay;
	ngx_uint_t i;

	for (i = 0; i < ctx->n; i++) {
		ngx_http_sluice_limit_t *lim = ctx->lim[i];
		const sluice_rate_t *rate = &lim->limit.rate;
		unsigned __int128 u;

		if (lim->nodelay)
			continue;
		u = (unsigned __int128)(lim->delay + ctx->items[i].cost) *
		    rate->interval;
		u = (u + rate->per - 1) / rate->per;
		cover = u > UINT64_MAX ? UINT64_MAX : (uint64_t)u;
		if (ctx->items[i].summary.reset_after_us <= cover)
			continue;
		delay = ctx->items[i].summary.reset_after_us - cover;
		if (delay > best) {
			best = delay;
			*which = i;
		}
	}
	return best;
}

static void ngx_http_sluice_delay_handler(ngx_http_request_t *r)
{
	ngx_event_t *wev = r->connection->write;

	if (!wev->timedout) {
		if (ngx_handle_write_event(wev, 0) != NGX_OK)
			ngx_http_finalize_request(
				r, NGX_HTTP_INTERNAL_SERVER_ERROR);
		return;
	}
	wev->timedout = 0;
	if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK) {
		ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
		return;
	}
	r->read_event_handler = ngx_http_block_reading;
	r->write_event_handler = ngx_http_core_run_phases;
	ngx_http_core_run_phases(r);
}

static ngx_int_t ngx_http_sluice_handler(ngx_http_request_t *r)
{
	ngx_http_sluice_loc_conf_t *lcf;
	ngx_http_sluice_ctx_t *ctx;
	ngx_uint_t i, which;
	uint64_t delay_us;
	ngx_msec_t delay;
	ngx_int_t rc;

	ctx = ngx_http_get_module_ctx(r, ngx_http_sluice_module);
	if (ctx && ctx->decided)
		return NGX_DECLINED; /* back from a delay */
	if (ctx && ctx->pending)
		return NGX_AGAIN;

	if (ctx == NULL) {
		lcf = ngx_http_get_module_loc_conf(r, ngx_http_sluice_module);
		if (lcf->limits == NULL || r != r->main)
			return NGX_DECLINED;
		ctx = ngx_pcalloc(r->pool, sizeof(*ctx));
		if (ctx == NULL)
			return NGX_HTTP_INTERNAL_SERVER_ERROR;
		ctx->r = r;
		rc = build_items(r, lcf, ctx);
		if (rc != NGX_OK)
			return rc == NGX_DECLINED
				       ? NGX_DECLINED
				       : NGX_HTTP_INTERNAL_SERVER_ERROR;
		ngx_http_set_ctx(r, ctx, ngx_http_sluice_module);
	}
	lcf = ngx_http_get_module_loc_conf(r, ngx_http_sluice_module);

	if (take_stages(ctx) == NGX_AGAIN) {
		/* Held until take_done runs the phases again. */
		r->main->count++;
		return NGX_DONE;
	}
	ctx->decided = 1;

	if (ctx->error) {
		/* As limit_req when its zone is full: refused. */
		ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
			      "sluice: store of zone \"%V\" failed: %s",
			      &ctx->lim[ctx->next]->zone->name,
			      sluice_strerror((int)ctx->error));
		refund_taken(ctx);
		ctx->status = NGX_HTTP_SLUICE_REJECTED;
		return lcf->status;
	}

	if (ctx->rejected) {
		/* The refusing take's items say which limit refused. */
		ctx->which = ctx->next;
		ctx->d = ctx->items[ctx->next].summary;
		for (i = ctx->next; i < ctx->stage_end; i++)
			if (!ctx->items[i].allowed) {
				ctx->which = i;
				ctx->d = ctx->items[i].summary;
				break;
			}
		refund_taken(ctx);
		ngx_log_error(lcf->log_level, r->connection->log, 0,
			      "limiting requests%s, retry after %uLms by zone "
			      "\"%V\"",
			      lcf->dry_run ? ", dry run" : "",
			      (uint64_t)sluice_us_to_ms_ceil(sluice_retry_us(
				      &ctx->lim[ctx->which]->limit, &ctx->d)),
			      &ctx->lim[ctx->which]->zone->name);
		if (lcf->dry_run) {
			ctx->status = NGX_HTTP_SLUICE_REJECTED_DRY_RUN;
			return NGX_DECLINED;
		}
		ctx->status = NGX_HTTP_SLUICE_REJECTED;
		if (lcf->headers &&
		    send_headers(r, lcf->headers, ctx, 1) != NGX_OK)
			return NGX_HTTP_INTERNAL_SERVER_ERROR;
		return lcf->status;
	}

	/* Allowed: the most restrictive limit is the one reported. */
	ctx->which = 0;
	ctx->d = ctx->items[0].summary;
	for (i = 1; i < ctx->n; i++)
		if (sluice_decision_merge(&ctx->d, &ctx->items[i].summary))
			ctx->which = i;

	if (lcf->headers && send_headers(r, lcf->headers, ctx, 0) != NGX_OK)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;

	which = 0;
	delay_us = request_delay(ctx, &which);
	if (delay_us == 0) {
		ctx->status = NGX_HTTP_SLUICE_PASSED;
		return NGX_DECLINED;
	}
	ngx_log_error(lcf->delay_log_level, r->connection->log, 0,
		      "delaying request%s, %uLms by zone \"%V\"",
		      lcf->dry_run ? ", dry run" : "",
		      (uint64_t)sluice_us_to_ms_ceil(delay_us),
		      &ctx->lim[which]->zone->name);
	if (lcf->dry_run) {
		ctx->status = NGX_HTTP_SLUICE_DELAYED_DRY_RUN;
		return NGX_DECLINED;
	}
	ctx->status = NGX_HTTP_SLUICE_DELAYED;

	if (ngx_handle_read_event(r->connection->read, 0) != NGX_OK)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	/* A timer, never a blocked worker: the request sleeps until its
	 * turn, and a client that goes away is noticed meanwhile. */
	delay = (ngx_msec_t)sluice_us_to_ms_ceil(delay_us);
	r->read_event_handler = ngx_http_test_reading;
	r->write_event_handler = ngx_http_sluice_delay_handler;
	ngx_add_timer(r->connection->write, delay);
	return NGX_AGAIN;
}

/* ---------------------------------------------------------- variables */

enum {
	VAR_STATUS,
	VAR_LIMIT,
	VAR_REMAINING,
	VAR_RETRY_AFTER,
	VAR_RESET,
};

static ngx_int_t ngx_http_sluice_variable(ngx_http_request_t *r,
					  ngx_http_variable_value_t *v,
					  uintptr_t data)
{
	ngx_http_sluice_ctx_t *ctx;
	uint64_t n;
	u_char *p;

	ctx = ngx_http_get_module_ctx(r->main, ngx_http_sluice_module);
	if (ctx == NULL || ctx->status == NGX_HTTP_SLUICE_NONE) {
		v->not_found = 1;
		return NGX_OK;
	}
	v->valid = 1;
	v->no_cacheable = 0;
	v->not_found = 0;
	if (data == VAR_STATUS) {
		v->len = ngx_http_sluice_status_text[ctx->status].len;
		v->data = ngx_http_sluice_status_text[ctx->status].data;
		return NGX_OK;
	}
	switch (data) {
	case VAR_LIMIT:
		n = ctx->d.limit;
		break;
	case VAR_REMAINING:
		n = ctx->d.remaining;
		break;
	case VAR_RETRY_AFTER:
		n = ctx->d.allowed
			    ? 0
			    : sluice_retry_after_s(sluice_retry_us(
				      &ctx->lim[ctx->which]->limit, &ctx->d));
		break;
	default:
		n = sluice_us_to_s_ceil(ctx->d.reset_after_us);
		break;
	}
	p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
	if (p == NULL)
		return NGX_ERROR;
	v->len = ngx_sprintf(p, "%uL", n) - p;
	v->data = p;
	return NGX_OK;
}

static ngx_http_variable_t ngx_http_sluice_vars[] = {
	{ngx_string("sluice_limit_status"), NULL, ngx_http_sluice_variable,
	 VAR_STATUS, NGX_HTTP_VAR_NOCACHEABLE, 0},
	{ngx_string("sluice_limit_limit"), NULL, ngx_http_sluice_variable,
	 VAR_LIMIT, NGX_HTTP_VAR_NOCACHEABLE, 0},
	{ngx_string("sluice_limit_remaining"), NULL, ngx_http_sluice_variable,
	 VAR_REMAINING, NGX_HTTP_VAR_NOCACHEABLE, 0},
	{ngx_string("sluice_limit_retry_after"), NULL, ngx_http_sluice_variable,
	 VAR_RETRY_AFTER, NGX_HTTP_VAR_NOCACHEABLE, 0},
	{ngx_string("sluice_limit_reset"), NULL, ngx_http_sluice_variable,
	 VAR_RESET, NGX_HTTP_VAR_NOCACHEABLE, 0},
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

/* ------------------------------------------------------ configuration */

static void *ngx_http_sluice_create_main_conf(ngx_conf_t *cf)
{
	ngx_http_sluice_main_conf_t *smcf;

	smcf = ngx_pcalloc(cf->pool, sizeof(*smcf));
	if (smcf == NULL)
		return NULL;
	if (ngx_array_init(&smcf->zones, cf->pool, 4,
			   sizeof(ngx_http_sluice_zone_t *)) != NGX_OK ||
	    ngx_array_init(&smcf->stores, cf->pool, 4,
			   sizeof(ngx_http_sluice_store_t *)) != NGX_OK)
		return NULL;
	return smcf;
}

/* Gives each zone with no store= its own file, now that the directory is
 * known. */
static char *ngx_http_sluice_init_main_conf(ngx_conf_t *cf, void *conf)
{
	ngx_http_sluice_main_conf_t *smcf = conf;
	ngx_http_sluice_zone_t **zp = smcf->zones.elts, *z;
	ngx_uint_t i;
	u_char *p;

	if (smcf->store_dir.data == NULL) {
		ngx_str_set(&smcf->store_dir, NGX_HTTP_SLUICE_STORE_DIR);
	}
	for (i = 0; i < smcf->zones.nelts; i++) {
		z = zp[i];
		if (z->store->cfg.kind != SLUICE_STORE_SHARED ||
		    z->store->cfg.shm_path)
			continue;
		p = ngx_pnalloc(cf->pool, smcf->store_dir.len + z->name.len +
						  sizeof("/nginx-sluice-"));
		if (p == NULL)
			return NGX_CONF_ERROR;
		z->store->shown.data = p;
		p = ngx_sprintf(p, "%V/nginx-sluice-%V", &smcf->store_dir,
				&z->name);
		z->store->shown.len = p - z->store->shown.data;
		*p = '\0';
		z->store->cfg.shm_path = (char *)z->store->shown.data;
	}
	return NGX_CONF_OK;
}

static void *ngx_http_sluice_create_loc_conf(ngx_conf_t *cf)
{
	ngx_http_sluice_loc_conf_t *conf;

	conf = ngx_pcalloc(cf->pool, sizeof(*conf));
	if (conf == NULL)
		return NULL;
	conf->limits = NULL;
	conf->status = NGX_CONF_UNSET_UINT;
	conf->log_level = NGX_CONF_UNSET_UINT;
	conf->dry_run = NGX_CONF_UNSET;
	conf->headers = NGX_CONF_UNSET_UINT;
	return conf;
}

static char *ngx_http_sluice_merge_loc_conf(ngx_conf_t *cf, void *parent,
					    void *child)
{
	ngx_http_sluice_loc_conf_t *prev = parent;
	ngx_http_sluice_loc_conf_t *conf = child;

	if (conf->limits == NULL)
		conf->limits = prev->limits;
	ngx_conf_merge_uint_value(conf->log_level, prev->log_level,
				  NGX_LOG_ERR);
	conf->delay_log_level = (conf->log_level == NGX_LOG_INFO)
					? NGX_LOG_INFO
					: conf->log_level + 1;
	ngx_conf_merge_uint_value(conf->status, prev->status,
				  NGX_HTTP_SERVICE_UNAVAILABLE);
	ngx_conf_merge_value(conf->dry_run, prev->dry_run, 0);
	ngx_conf_merge_uint_value(conf->headers, prev->headers,
				  NGX_HTTP_SLUICE_HEADERS_OFF);
	return NGX_CONF_OK;
}

/* "10r/s", "30r/m" (nginx's) or sluice's exact forms ("2/s", "1/3s"). */
static char *parse_rate(ngx_str_t *text, sluice_rate_t *rate)
{
	static u_char msg[300];
	char buf[64], err[200];
	size_t i, n = 0;

	if (text->len >= sizeof(buf))
		goto bad;
	for (i = 0; i < text->len; i++) {
		/* nginx's "r/" is sluice's "/" */
		if (text->data[i] == 'r' && i + 1 < text->len &&
		    text->data[i + 1] == '/' && i > 0)
			continue;
		buf[n++] = (char)text->data[i];
	}
	buf[n] = '\0';
	if (sluice_rate_parse(buf, rate, err, sizeof(err)) == 0)
		return NGX_CONF_OK;
	ngx_snprintf(msg, sizeof(msg), "invalid rate \"%V\": %s%Z", text, err);
	return (char *)msg;
bad:
	ngx_snprintf(msg, sizeof(msg), "invalid rate \"%V\"%Z", text);
	return (char *)msg;
}

static char *ngx_http_sluice_zone_cmd(ngx_conf_t *cf, ngx_command_t *cmd,
				      void *conf)
{
	ngx_http_sluice_main_conf_t *smcf = conf;
	ngx_http_compile_complex_value_t ccv;
	ngx_http_sluice_store_t *store, **sp, **stores;
	ngx_http_sluice_zone_t *zone, **zones, **zp;
	ngx_str_t *value, name = ngx_null_string, size = ngx_null_string;
	ngx_str_t rate = ngx_null_string, store_text = ngx_null_string;
	ngx_uint_t i;
	ssize_t bytes = 0;
	u_char *p;
	char *rv;

	value = cf->args->elts;
	for (i = 2; i < cf->args->nelts; i++) {
		if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {
			name.data = value[i].data + 5;
			p = (u_char *)ngx_strchr(name.data, ':');
			if (p == NULL) {
				ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
						   "invalid zone size \"%V\"",
						   &value[i]);
				return NGX_CONF_ERROR;
			}
			name.len = p - name.data;
			size.data = p + 1;
			size.len = value[i].data + value[i].len - size.data;
			bytes = ngx_parse_size(&size);
			if (bytes == NGX_ERROR) {
				ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
						   "invalid zone size \"%V\"",
						   &value[i]);
				return NGX_CONF_ERROR;
			}
			if (bytes < NGX_HTTP_SLUICE_ZONE_MIN) {
				ngx_conf_log_error(
					NGX_LOG_EMERG, cf, 0,
					"zone \"%V\" is too small (at least "
					"32k: %d buckets)",
					&value[i],
					NGX_HTTP_SLUICE_ZONE_MIN /
						NGX_HTTP_SLUICE_BUCKET_BYTES);
				return NGX_CONF_ERROR;
			}
			continue;
		}
		if (ngx_strncmp(value[i].data, "rate=", 5) == 0) {
			rate.data = value[i].data + 5;
			rate.len = value[i].len - 5;
			continue;
		}
		if (ngx_strncmp(value[i].data, "store=", 6) == 0) {
			store_text.data = value[i].data + 6;
			store_text.len = value[i].len - 6;
			continue;
		}
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "invalid parameter \"%V\"", &value[i]);
		return NGX_CONF_ERROR;
	}
	if (name.len == 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"%V\" must have \"zone\" parameter",
				   &cmd->name);
		return NGX_CONF_ERROR;
	}
	if (name.len > SLUICE_KEY_NAME_MAX) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "zone name \"%V\" is longer than %d bytes",
				   &name, SLUICE_KEY_NAME_MAX);
		return NGX_CONF_ERROR;
	}
	for (i = 0; i < name.len; i++)
		if (!(isalnum(name.data[i]) || name.data[i] == '_' ||
		      name.data[i] == '-' || name.data[i] == '.')) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
					   "invalid zone name \"%V\" (letters, "
					   "digits, '_', '-', '.')",
					   &name);
			return NGX_CONF_ERROR;
		}
	if (rate.len == 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"%V\" must have \"rate\" parameter",
				   &cmd->name);
		return NGX_CONF_ERROR;
	}

	zones = smcf->zones.elts;
	for (i = 0; i < smcf->zones.nelts; i++)
		if (zones[i]->name.len == name.len &&
		    ngx_strncmp(zones[i]->name.data, name.data, name.len) ==
			    0) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
					   "duplicate zone \"%V\" (first in "
					   "%s:%ui)",
					   &name, zones[i]->conf_file,
					   zones[i]->conf_line);
			return NGX_CONF_ERROR;
		}

	/* Limits point at it: allocated alone, never moved. */
	zone = ngx_pcalloc(cf->pool, sizeof(*zone));
	zp = ngx_array_push(&smcf->zones);
	if (zone == NULL || zp == NULL)
		return NGX_CONF_ERROR;
	*zp = zone;
	/* NUL-terminated: it names the zone's buckets (sluice_key_make). */
	zone->name.data = ngx_pnalloc(cf->pool, name.len + 1);
	if (zone->name.data == NULL)
		return NGX_CONF_ERROR;
	ngx_memcpy(zone->name.data, name.data, name.len);
	zone->name.data[name.len] = '\0';
	zone->name.len = name.len;
	zone->size = (size_t)bytes;
	zone->rate_text = rate;
	zone->conf_file = cf->conf_file->file.name.data;
	zone->conf_line = cf->conf_file->line;

	rv = parse_rate(&rate, &zone->rate);
	if (rv != NGX_CONF_OK) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", rv);
		return NGX_CONF_ERROR;
	}

	ngx_memzero(&ccv, sizeof(ccv));
	ccv.cf = cf;
	ccv.value = &value[1];
	ccv.complex_value = &zone->key;
	if (ngx_http_compile_complex_value(&ccv) != NGX_OK)
		return NGX_CONF_ERROR;

	store = ngx_pcalloc(cf->pool, sizeof(*store));
	if (store == NULL)
		return NGX_CONF_ERROR;
	rv = ngx_http_sluice_store_parse(cf, zone, &store_text,
					 &smcf->store_dir, store);
	if (rv != NGX_CONF_OK) {
		if (rv != NGX_CONF_ERROR)
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "%s", rv);
		return NGX_CONF_ERROR;
	}

	/* Zones naming one file share one store (and must agree on its
	 * size: the file is made for one number of buckets). */
	stores = smcf->stores.elts;
	for (i = 0; store->cfg.shm_path && i < smcf->stores.nelts; i++) {
		if (stores[i]->cfg.shm_path == NULL ||
		    ngx_strcmp(stores[i]->cfg.shm_path, store->cfg.shm_path) !=
			    0)
			continue;
		if (stores[i]->cfg.max_keys != store->cfg.max_keys) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
					   "zone \"%V\" has another size than "
					   "a zone before it on store \"%V\"",
					   &zone->name, &store->shown);
			return NGX_CONF_ERROR;
		}
		zone->store = stores[i];
		return NGX_CONF_OK;
	}
	sp = ngx_array_push(&smcf->stores);
	if (sp == NULL)
		return NGX_CONF_ERROR;
	*sp = store;
	zone->store = store;
	return NGX_CONF_OK;
}

static char *ngx_http_sluice_limit_cmd(ngx_conf_t *cf, ngx_command_t *cmd,
				       void *conf)
{
	ngx_http_sluice_loc_conf_t *lcf = conf;
	ngx_http_sluice_main_conf_t *smcf;
	ngx_http_sluice_limit_t *limit, *limits;
	ngx_http_sluice_zone_t **zones, *zone = NULL;
	ngx_str_t *value, s, zname = ngx_null_string;
	ngx_int_t burst = 0, delay = 0, cost = 1;
	ngx_http_complex_value_t *cost_cv = NULL;
	ngx_uint_t i, nodelay = 0, has_delay = 0;
	char err[200];

	value = cf->args->elts;
	for (i = 1; i < cf->args->nelts; i++) {
		if (ngx_strncmp(value[i].data, "zone=", 5) == 0) {
			zname.len = value[i].len - 5;
			zname.data = value[i].data + 5;
			continue;
		}
		if (ngx_strncmp(value[i].data, "burst=", 6) == 0) {
			burst = ngx_atoi(value[i].data + 6, value[i].len - 6);
			if (burst < 0) {
				ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
						   "invalid burst value \"%V\"",
						   &value[i]);
				return NGX_CONF_ERROR;
			}
			continue;
		}
		if (ngx_strncmp(value[i].data, "delay=", 6) == 0) {
			delay = ngx_atoi(value[i].data + 6, value[i].len - 6);
			if (delay < 0) {
				ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
						   "invalid delay value \"%V\"",
						   &value[i]);
				return NGX_CONF_ERROR;
			}
			has_delay = 1;
			continue;
		}
		if (ngx_strcmp(value[i].data, "nodelay") == 0) {
			nodelay = 1;
			continue;
		}
		if (ngx_strncmp(value[i].data, "cost=", 5) == 0) {
			s.data = value[i].data + 5;
			s.len = value[i].len - 5;
			if (s.len && s.data[0] == '$') {
				ngx_http_compile_complex_value_t ccv;

				cost_cv =
					ngx_palloc(cf->pool, sizeof(*cost_cv));
				if (cost_cv == NULL)
					return NGX_CONF_ERROR;
				ngx_memzero(&ccv, sizeof(ccv));
				ccv.cf = cf;
				ccv.value = &s;
				ccv.complex_value = cost_cv;
				if (ngx_http_compile_complex_value(&ccv) !=
				    NGX_OK)
					return NGX_CONF_ERROR;
				continue;
			}
			cost = ngx_atoi(s.data, s.len);
			if (cost <= 0) {
				ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
						   "invalid cost value \"%V\" "
						   "(a positive integer or a "
						   "variable)",
						   &value[i]);
				return NGX_CONF_ERROR;
			}
			continue;
		}
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "invalid parameter \"%V\"", &value[i]);
		return NGX_CONF_ERROR;
	}

	if (zname.len == 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"%V\" must have \"zone\" parameter",
				   &cmd->name);
		return NGX_CONF_ERROR;
	}
	if (nodelay && has_delay) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"nodelay\" and \"delay\" are mutually "
				   "exclusive");
		return NGX_CONF_ERROR;
	}
	if (delay > burst) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "\"delay=%i\" is more than \"burst=%i\"",
				   delay, burst);
		return NGX_CONF_ERROR;
	}

	/* Zones are declared at the http level, before any server: the
	 * zone must be known here (limit_req's zones may come later; a
	 * zone here is a store to open, checked at once). */
	smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sluice_module);
	zones = smcf->zones.elts;
	for (i = 0; i < smcf->zones.nelts; i++)
		if (zones[i]->name.len == zname.len &&
		    ngx_strncmp(zones[i]->name.data, zname.data, zname.len) ==
			    0)
			zone = zones[i];
	if (zone == NULL) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "unknown sluice_limit_zone \"%V\" (declare "
				   "it before it is used)",
				   &zname);
		return NGX_CONF_ERROR;
	}

	if (lcf->limits == NULL) {
		lcf->limits = ngx_array_create(cf->pool, 2, sizeof(*limit));
		if (lcf->limits == NULL)
			return NGX_CONF_ERROR;
	}
	limits = lcf->limits->elts;
	for (i = 0; i < lcf->limits->nelts; i++)
		if (limits[i].zone == zone) {
			ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
					   "duplicate sluice_limit zone \"%V\"",
					   &zname);
			return NGX_CONF_ERROR;
		}
	if (lcf->limits->nelts >= SLUICE_MAX_LIMITS) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "more than %d sluice_limit in one level",
				   SLUICE_MAX_LIMITS);
		return NGX_CONF_ERROR;
	}

	limit = ngx_array_push(lcf->limits);
	if (limit == NULL)
		return NGX_CONF_ERROR;
	ngx_memzero(limit, sizeof(*limit));
	limit->zone = zone;
	limit->delay = (ngx_uint_t)delay;
	limit->nodelay = nodelay;
	limit->cost = (ngx_uint_t)cost;
	limit->cost_cv = cost_cv;
	if (sluice_limit_init(&limit->limit, (uint64_t)burst + 1, &zone->rate,
			      err, sizeof(err)) != 0) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
				   "burst=%i at rate \"%V\": %s", burst,
				   &zone->rate_text, err);
		return NGX_CONF_ERROR;
	}
	return NGX_CONF_OK;
}

static ngx_int_t ngx_http_sluice_init(ngx_conf_t *cf)
{
	ngx_http_core_main_conf_t *cmcf;
	ngx_http_handler_pt *h;

	cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
	h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
	if (h == NULL)
		return NGX_ERROR;
	*h = ngx_http_sluice_handler;
	return NGX_OK;
}

/* In the master, before the workers are forked: every worker inherits
 * the stores' mappings. */
static ngx_int_t ngx_http_sluice_init_module(ngx_cycle_t *cycle)
{
	ngx_http_sluice_main_conf_t *smcf;

	if (ngx_get_conf(cycle->conf_ctx, ngx_http_module) == NULL)
		return NGX_OK;
	smcf = ngx_http_cycle_get_module_main_conf(cycle,
						   ngx_http_sluice_module);
	if (smcf == NULL)
		return NGX_OK;
	return ngx_http_sluice_stores_open(cycle, smcf);
}
