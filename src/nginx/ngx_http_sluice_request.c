/*
 * ngx_http_sluice_request.c -- a request's decision: in the preaccess
 * phase, where limit_req decides it.
 *
 * Each sluice_limit of its location is one item (the zone's key, one
 * limit: capacity burst + 1 at the zone's rate, the cost) of a take
 * through the store driver interface (store/store.h); the items of one
 * store go in one all-or-nothing take, so a refused request charges
 * none of a location's limits (a store that had charged it before
 * another refused gives the cost back).  A take answers through a
 * callback: the local stores call it before take() returns, a store
 * with a loop of its own later, when the handler has returned NGX_DONE
 * with the request held (r->main->count) and the callback runs the
 * phases again.  A store that fails (Redis away, or slower than its
 * timeout=) leaves each of its zones to its fail=: open, closed, or
 * local (the worker's own buckets of the same limit).
 *
 * The bucket is GCRA's: after a take, reset_after is how far its
 * theoretical arrival time lies ahead.  A request that passes is delayed
 * (a timer on the connection's write event, never a blocked worker)
 * until its exact turn: reset_after minus the time that delay + cost
 * tokens take to refill, which is limit_req's (excess - delay) / rate
 * for the same burst and delay.
 */
#include "ngx_http_sluice.h"

#include "policy/ratelimit_headers.h"
#include "util/buf.h"

#include <string.h>

static ngx_str_t ngx_http_sluice_status_text[] = {
	ngx_null_string,
	ngx_string("PASSED"),
	ngx_string("DELAYED"),
	ngx_string("REJECTED"),
	ngx_string("DELAYED_DRY_RUN"),
	ngx_string("REJECTED_DRY_RUN"),
};

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
	uint32_t open;	      /* items a failed store let through (fail=open) */
	uint32_t local;	      /* items decided on the worker's own buckets */
	unsigned decided : 1;
	unsigned rejected : 1;
	unsigned called : 1;  /* the take's callback has run */
	unsigned pending : 1; /* the handler returned NGX_DONE for it */
	/* Allocated off the request's pool (with its keys), for a location
	 * whose stores answer later: a call in flight borrows the items,
	 * so they outlive a request that ends first (the client gone). */
	unsigned heap : 1;
} ngx_http_sluice_ctx_t;

/* Set when the worker exits (exit_process): a call that fails then
 * leaves its request alone; the worker runs no more turns. */
ngx_uint_t ngx_http_sluice_exiting;

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

ngx_int_t ngx_http_sluice_header_lines(ngx_http_request_t *r, ngx_uint_t mode,
				       const char *buf, size_t len,
				       ngx_table_elt_t **added, ngx_uint_t max,
				       ngx_uint_t *nadded)
{
	const char *p, *end, *eol;
	int keep;

	for (p = buf, end = buf + len; p < end; p = eol + 2) {
		eol = memchr(p, '\r', (size_t)(end - p));
		if (eol == NULL)
			break;
		if (p[0] == 'X')
			keep = mode != NGX_HTTP_SLUICE_HEADERS_DRAFT_11;
		else if (p[0] == 'R' && p[1] == 'a')
			keep = mode != NGX_HTTP_SLUICE_HEADERS_LEGACY;
		else
			keep = 1; /* Retry-After */
		if (!keep)
			continue;
		if (add_header(r, p, (size_t)(eol - p)) != NGX_OK)
			return NGX_ERROR;
		if (added && *nadded < max)
			added[(*nadded)++] =
				(ngx_table_elt_t *)
					r->headers_out.headers.last->elts +
				r->headers_out.headers.last->nelts - 1;
	}
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
	ngx_int_t rc;

	ngx_memcpy(name, lim->zone->name.data, lim->zone->name.len);
	name[lim->zone->name.len] = '\0';
	sluice_ratelimit_headers(&buf, name, &lim->limit, &ctx->d, limited);
	if (buf.oom) {
		sluice_buf_free(&buf);
		return NGX_ERROR;
	}
	rc = ngx_http_sluice_header_lines(r, mode, buf.data, buf.len, NULL, 0,
					  NULL);
	sluice_buf_free(&buf);
	return rc;
}

/* ----------------------------------------------------------- decision */

static void take_done(void *arg, int status, int allowed);
static void ctx_free(ngx_http_sluice_ctx_t *ctx);

/* The store of the take under way failed (status < 0): each zone's fail=
 * decides, as sluice serve's on_store_error.  A fail=closed zone refuses
 * the request (ctx->error); otherwise the fail=local items are taken
 * together on the worker's own buckets and the rest pass unlimited. */
static void stage_failed(ngx_http_sluice_ctx_t *ctx, int status)
{
	ngx_http_sluice_store_t *store = ctx->lim[ctx->next]->zone->store;
	sluice_take_item_t local[SLUICE_MAX_LIMITS];
	ngx_uint_t i, k, at[SLUICE_MAX_LIMITS], nlocal = 0;
	int rc;

	/* A local store that fails (a damaged file) refuses, as limit_req
	 * does when its zone cannot hold a key: fail= is a Redis store's. */
	if (store->cfg.kind != SLUICE_STORE_REDIS &&
	    store->cfg.kind != SLUICE_STORE_REDIS_CLUSTER) {
		ctx->error = status;
		return;
	}
	for (i = ctx->next; i < ctx->stage_end; i++)
		if (ctx->lim[i]->zone->fail == NGX_HTTP_SLUICE_FAIL_CLOSED) {
			ctx->error = status;
			return;
		}
	for (i = ctx->next; i < ctx->stage_end; i++) {
		if (ctx->lim[i]->zone->fail == NGX_HTTP_SLUICE_FAIL_LOCAL &&
		    store->local_opened) {
			at[nlocal] = i;
			local[nlocal++] = ctx->items[i];
			continue;
		}
		ctx->open |= (uint32_t)1 << i;
		ctx->items[i].allowed = 1;
	}
	if (nlocal) {
		rc = sluice_memstore_take_many(store->local.local, local,
					       nlocal, sluice_now_us());
		for (k = 0; k < nlocal; k++) {
			i = at[k];
			if (rc < 0) { /* out of memory: as fail=open */
				ctx->open |= (uint32_t)1 << i;
				ctx->items[i].allowed = 1;
				continue;
			}
			ctx->local |= (uint32_t)1 << i;
			ctx->items[i].allowed = local[k].allowed;
			ctx->items[i].summary = local[k].summary;
		}
		if (rc == 0) {
			ctx->rejected = 1;
			return;
		}
	}
	ctx->next = ctx->stage_end;
}

/* A take's answer, from inside take() or later. */
static void stage_answer(ngx_http_sluice_ctx_t *ctx, int status, int allowed)
{
	if (status < 0)
		stage_failed(ctx, status);
	else if (!allowed)
		ctx->rejected = 1;
	else
		ctx->next = ctx->stage_end;
}

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
			stage_answer(ctx, rc, 0);
			continue;
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
	if (r == NULL) {
		/* The request ended while Redis answered (the client went
		 * away): the charge stands, the memory goes. */
		ctx_free(ctx);
		return;
	}
	if (ctx->pending && ngx_http_sluice_exiting)
		return; /* failed by the worker's exit: no turn runs again */
	stage_answer(ctx, status, allowed);
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
	r->read_event_handler = ngx_http_block_reading;
	r->write_event_handler = ngx_http_core_run_phases;
	ngx_http_core_run_phases(r);
	ngx_http_run_posted_requests(c);
}

static void refund_done(void *arg, int status, int allowed)
{
}

/* 0: decided by its store; 1: on the worker's own buckets; 2: not
 * decided (its store failed open). */
static int item_class(ngx_http_sluice_ctx_t *ctx, ngx_uint_t i)
{
	uint32_t bit = (uint32_t)1 << i;

	return (ctx->open & bit) ? 2 : (ctx->local & bit) ? 1 : 0;
}

/* A refused request charges nothing: the stores that had charged it
 * (those before the one that refused) give the cost back; items a
 * failed store let through were charged nowhere, those decided on the
 * worker's own buckets are given back there. */
static void refund_taken(ngx_http_sluice_ctx_t *ctx)
{
	ngx_http_sluice_store_t *store;
	sluice_backend_t *be;
	ngx_uint_t i, end;
	int class;

	for (i = 0; i < ctx->next; i = end) {
		store = ctx->lim[i]->zone->store;
		class = item_class(ctx, i);
		for (end = i + 1;
		     end < ctx->next && ctx->lim[end]->zone->store == store &&
		     item_class(ctx, end) == class;
		     end++)
			;
		if (class == 2)
			continue;
		be = class == 1 ? &store->local : &store->be;
		/* The local stores answer inside refund(); a store that
		 * answers later copies the items (sluice_redis_refund()). */
		(void)be->ops->refund(be->impl, &ctx->items[i], end - i,
				      sluice_now_us(), refund_done, NULL);
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
			k = ctx->heap ? ngx_alloc(len, r->connection->log)
				      : ngx_pnalloc(r->pool, len);
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

		if (lim->nodelay || item_class(ctx, i) == 2)
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

/* A context allocated off the pool, with its keys. */
static void ctx_free(ngx_http_sluice_ctx_t *ctx)
{
	ngx_uint_t i;

	for (i = 0; i < ctx->n; i++)
		ngx_free((void *)ctx->items[i].key);
	ngx_free(ctx);
}

/* The request's decision survives an internal redirect (which clears
 * the modules' contexts) in a marker on the request's pool: a request
 * redirected after its decision is not charged again, as limit_req's
 * r->main->limit_req_status keeps it from being, and the variables still
 * say what was decided.  The request's pool goes: a context of its own
 * (heap) goes with it, unless a call in flight still borrows its items
 * (take_done frees it then). */
static void ctx_marker(void *data)
{
	ngx_http_sluice_ctx_t *ctx = data;

	if (!ctx->heap)
		return;
	if (ctx->pending) {
		ctx->r = NULL;
		return;
	}
	ctx_free(ctx);
}

/* 1 when a store of the location answers from the loop (Redis). */
static int answers_later(ngx_http_sluice_loc_conf_t *lcf)
{
	ngx_http_sluice_limit_t *limits = lcf->limits->elts;
	ngx_uint_t i;

	for (i = 0; i < lcf->limits->nelts; i++)
		if (limits[i].zone->store->cfg.kind == SLUICE_STORE_REDIS ||
		    limits[i].zone->store->cfg.kind ==
			    SLUICE_STORE_REDIS_CLUSTER)
			return 1;
	return 0;
}

static ngx_http_sluice_ctx_t *request_ctx(ngx_http_request_t *r)
{
	ngx_http_sluice_ctx_t *ctx;
	ngx_pool_cleanup_t *c;

	ctx = ngx_http_get_module_ctx(r, ngx_http_sluice_module);
	if (ctx)
		return ctx;
	for (c = r->pool->cleanup; c; c = c->next)
		if (c->handler == ctx_marker) {
			ctx = c->data;
			ngx_http_set_ctx(r, ctx, ngx_http_sluice_module);
			return ctx;
		}
	return NULL;
}

/* A request's context on its first pass, with its items: NGX_OK and
 * *out, NGX_DECLINED (no limit here, or a subrequest, or nothing to
 * take) or NGX_HTTP_INTERNAL_SERVER_ERROR. */
static ngx_int_t ctx_create(ngx_http_request_t *r, ngx_http_sluice_ctx_t **out)
{
	ngx_http_sluice_loc_conf_t *lcf;
	ngx_http_sluice_ctx_t *ctx;
	ngx_pool_cleanup_t *cln;
	ngx_int_t rc;

	lcf = ngx_http_get_module_loc_conf(r, ngx_http_sluice_module);
	if (lcf->limits == NULL || r != r->main)
		return NGX_DECLINED;
	cln = ngx_pool_cleanup_add(r->pool, 0);
	if (cln == NULL)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	if (answers_later(lcf)) {
		ctx = ngx_calloc(sizeof(*ctx), r->connection->log);
		if (ctx)
			ctx->heap = 1;
	} else {
		ctx = ngx_pcalloc(r->pool, sizeof(*ctx));
	}
	if (ctx == NULL)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	cln->handler = ctx_marker;
	cln->data = ctx;
	ctx->r = r;
	rc = build_items(r, lcf, ctx);
	if (rc != NGX_OK)
		return rc == NGX_DECLINED ? NGX_DECLINED
					  : NGX_HTTP_INTERNAL_SERVER_ERROR;
	ngx_http_set_ctx(r, ctx, ngx_http_sluice_module);
	*out = ctx;
	return NGX_OK;
}

/* A store failed and a zone of it says fail=closed (or, on a local
 * store, as limit_req when its zone is full): refused. */
static ngx_int_t refuse_store_failed(ngx_http_request_t *r,
				     ngx_http_sluice_loc_conf_t *lcf,
				     ngx_http_sluice_ctx_t *ctx)
{
	ngx_log_error(lcf->log_level, r->connection->log, 0,
		      "sluice: store of zone \"%V\" failed: %s",
		      &ctx->lim[ctx->next]->zone->name,
		      sluice_strerror((int)ctx->error));
	refund_taken(ctx);
	ngx_http_sluice_config_refund(r);
	ctx->status = NGX_HTTP_SLUICE_REJECTED;
	return lcf->status;
}

/* A limit refused: the refusing take's items say which; the request
 * is refused (or, in a dry run, goes on), with nothing charged. */
static ngx_int_t refuse_rejected(ngx_http_request_t *r,
				 ngx_http_sluice_loc_conf_t *lcf,
				 ngx_http_sluice_ctx_t *ctx)
{
	ngx_uint_t i;

	ctx->which = ctx->next;
	ctx->d = ctx->items[ctx->next].summary;
	for (i = ctx->next; i < ctx->stage_end; i++)
		if (!ctx->items[i].allowed) {
			ctx->which = i;
			ctx->d = ctx->items[i].summary;
			break;
		}
	refund_taken(ctx);
	if (!lcf->dry_run)
		ngx_http_sluice_config_refund(r);
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
	if (lcf->headers && send_headers(r, lcf->headers, ctx, 1) != NGX_OK)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	return lcf->status;
}

/* Allowed: the most restrictive limit is the one reported (of those
 * decided: a store that failed open decided nothing), into ctx->which
 * and ctx->d; 0 when none decided. */
static int report_most_restrictive(ngx_http_sluice_ctx_t *ctx)
{
	ngx_uint_t i;

	for (i = 0; i < ctx->n && item_class(ctx, i) == 2; i++)
		;
	if (i == ctx->n)
		return 0;
	ctx->which = i;
	ctx->d = ctx->items[i].summary;
	for (i++; i < ctx->n; i++)
		if (item_class(ctx, i) != 2 &&
		    sluice_decision_merge(&ctx->d, &ctx->items[i].summary))
			ctx->which = i;
	return 1;
}

/* An allowed request goes on now, or after its delay (request_delay). */
static ngx_int_t pass_or_delay(ngx_http_request_t *r,
			       ngx_http_sluice_loc_conf_t *lcf,
			       ngx_http_sluice_ctx_t *ctx)
{
	ngx_uint_t which = 0;
	uint64_t delay_us;

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
	r->read_event_handler = ngx_http_test_reading;
	r->write_event_handler = ngx_http_sluice_delay_handler;
	ngx_add_timer(r->connection->write,
		      (ngx_msec_t)sluice_us_to_ms_ceil(delay_us));
	return NGX_AGAIN;
}

ngx_int_t ngx_http_sluice_handler(ngx_http_request_t *r)
{
	ngx_http_sluice_loc_conf_t *lcf;
	ngx_http_sluice_ctx_t *ctx;
	ngx_int_t rc;

	ctx = r == r->main ? request_ctx(r) : NULL;
	if (ctx && ctx->decided)
		return NGX_DECLINED; /* back from a delay */
	if (ctx && ctx->pending)
		return NGX_AGAIN;

	if (ctx == NULL) {
		rc = ctx_create(r, &ctx);
		if (rc != NGX_OK)
			return rc;
	}
	lcf = ngx_http_get_module_loc_conf(r, ngx_http_sluice_module);

	if (take_stages(ctx) == NGX_AGAIN) {
		/* Held until take_done runs the phases again; a client that
		 * goes away meanwhile ends the request (the context stays
		 * for the answer, ctx_marker). */
		r->main->count++;
		r->read_event_handler = ngx_http_test_reading;
		r->write_event_handler = ngx_http_request_empty_handler;
		return NGX_DONE;
	}
	ctx->decided = 1;

	if (ctx->error)
		return refuse_store_failed(r, lcf, ctx);
	if (ctx->rejected)
		return refuse_rejected(r, lcf, ctx);
	if (!report_most_restrictive(ctx)) {
		ctx->status = NGX_HTTP_SLUICE_PASSED;
		return NGX_DECLINED;
	}
	if (lcf->headers && !ngx_http_sluice_config_outranks(r, &ctx->d) &&
	    send_headers(r, lcf->headers, ctx, 0) != NGX_OK)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	return pass_or_delay(r, lcf, ctx);
}

/* ---------------------------------------------------------- variables */

ngx_int_t ngx_http_sluice_variable(ngx_http_request_t *r,
				   ngx_http_variable_value_t *v, uintptr_t data)
{
	ngx_http_sluice_ctx_t *ctx;
	ngx_uint_t status;
	sluice_decision_t d;
	uint64_t n, retry_us;
	u_char *p;

	/* The zones' decision, else the sluice_config rules'. */
	ctx = request_ctx(r->main);
	if (ctx && ctx->status != NGX_HTTP_SLUICE_NONE) {
		status = ctx->status;
		d = ctx->d;
		retry_us = d.allowed
				   ? 0
				   : sluice_retry_us(
					     &ctx->lim[ctx->which]->limit, &d);
	} else if (!ngx_http_sluice_config_decision(r->main, &status, &d,
						    &retry_us)) {
		v->not_found = 1;
		return NGX_OK;
	}
	v->valid = 1;
	v->no_cacheable = 0;
	v->not_found = 0;
	if (data == NGX_HTTP_SLUICE_VAR_STATUS) {
		v->len = ngx_http_sluice_status_text[status].len;
		v->data = ngx_http_sluice_status_text[status].data;
		return NGX_OK;
	}
	switch (data) {
	case NGX_HTTP_SLUICE_VAR_LIMIT:
		n = d.limit;
		break;
	case NGX_HTTP_SLUICE_VAR_REMAINING:
		n = d.remaining;
		break;
	case NGX_HTTP_SLUICE_VAR_RETRY_AFTER:
		n = d.allowed ? 0 : sluice_retry_after_s(retry_us);
		break;
	default:
		n = sluice_us_to_s_ceil(d.reset_after_us);
		break;
	}
	p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
	if (p == NULL)
		return NGX_ERROR;
	v->len = ngx_sprintf(p, "%uL", n) - p;
	v->data = p;
	return NGX_OK;
}
