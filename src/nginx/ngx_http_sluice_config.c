/*
 * ngx_http_sluice_config.c -- `sluice_config FILE;`: a `sluice serve`
 * rules file (tiers, overrides, composite keys, path rules, shadow rules)
 * applied inside nginx by the policy engine every front end drives
 * (src/policy: the config loader, rule matching, the verdict engine and
 * the rate-limit headers), so that nginx and `sluice serve` given one
 * file answer one request alike.
 *
 * What nginx gives the engine is what serve's /v1/check reads from the
 * headers nginx's auth_request sends it: the method, the request target
 * as the client sent it ($request_uri: the engine reads every spelling a
 * router may route it by), the request's header fields, and the client
 * address, nginx's $remote_addr (after the realip module).  The file's
 * trusted_proxies are not applied on top: realip is where nginx decides
 * whom to believe, and a second pass would let a client that nginx
 * already resolved name itself in X-Forwarded-For.
 *
 * The file's store: `memory` is a shared-memory file of store.max_keys
 * buckets under sluice_limit_store_dir, as a zone's (every worker charges
 * the same buckets; a reload and a binary upgrade keep them); `shared`
 * is the file it names (shared with sluice serve or a Node app on the
 * host).  A Redis store is refused with the file and line of `store:`
 * (the zones' Redis stores are not yet given to the file's rules).
 *
 * The decision is made in the preaccess phase, before sluice_limit's: a
 * refused request answers sluice_limit_status (else 429) with the
 * headers sluice_limit_headers keeps (else all of serve's); an allowed
 * one goes on to sluice_limit, whose refusal gives the rules' tokens back
 * (ngx_http_sluice_config_refund): one request is charged all or nothing.
 */
#include "ngx_http_sluice.h"

#include "policy/ratelimit_headers.h"
#include "util/buf.h"

#include <stdlib.h>
#include <string.h>

ngx_http_sluice_policy_t ngx_http_sluice_policy_off;

/* Header fields one verdict adds (X-RateLimit-* 3, Retry-After 2, the
 * draft's 2, with room to spare). */
#define NGX_HTTP_SLUICE_POLICY_HEADERS 16

/* One request's verdict under the file's rules. */
typedef struct {
	ngx_http_request_t *r;
	ngx_http_sluice_policy_t *policy;
	/* Kept once delivered (sluice_answer_keep()): a refund needs it
	 * after the handler, the variables read it; answer.take NULL: no
	 * rule applies. */
	sluice_answer_t answer;
	ngx_table_elt_t *hdrs[NGX_HTTP_SLUICE_POLICY_HEADERS];
	ngx_uint_t nhdrs;
	unsigned done : 1;     /* the verdict was delivered */
	unsigned pending : 1;  /* the handler returned NGX_DONE for it */
	unsigned answered : 1; /* the handler has acted on it */
	unsigned charged : 1;  /* allowed: enforcing rules hold its cost */
	unsigned dry_run : 1;  /* answered under sluice_limit_dry_run on */
} ngx_http_sluice_policy_ctx_t;

/* ------------------------------------------------------------ the file */

static void policy_free(void *data)
{
	ngx_http_sluice_policy_t *p = data;

	sluice_config_free(p->cfg);
	p->cfg = NULL;
}

/* The store of the file's rules (see the top of this file), shared with
 * a zone or another file naming the same shared-memory file.  Returns
 * NGX_CONF_OK or NGX_CONF_ERROR (logged). */
static char *policy_store(ngx_conf_t *cf, ngx_http_sluice_main_conf_t *smcf,
			  ngx_http_sluice_policy_t *p)
{
	const sluice_store_config_t *st = &p->cfg->store;
	ngx_http_sluice_store_t *store, **sp, **stores;
	ngx_uint_t i;
	size_t n;

	if (st->kind != SLUICE_STORE_MEMORY &&
	    st->kind != SLUICE_STORE_SHARED) {
		ngx_conf_log_error(
			NGX_LOG_EMERG, cf, 0,
			"sluice_config: %s:%d: store: a %s store is not "
			"available to sluice_config yet (memory and shared "
			"are; sluice_limit_zone's store=redis:// is)",
			p->file.data,
			p->cfg->store_line ? p->cfg->store_line : 1,
			sluice_config_store_name(p->cfg));
		return NGX_CONF_ERROR;
	}
	store = ngx_pcalloc(cf->pool, sizeof(*store));
	if (store == NULL)
		return NGX_CONF_ERROR;
	store->cfg.kind = SLUICE_STORE_SHARED;
	store->cfg.max_keys = st->max_keys;
	if (st->kind == SLUICE_STORE_SHARED) {
		n = ngx_strlen(st->shm_path);
		store->cfg.shm_path = ngx_pnalloc(cf->pool, n + 1);
		if (store->cfg.shm_path == NULL)
			return NGX_CONF_ERROR;
		ngx_memcpy(store->cfg.shm_path, st->shm_path, n + 1);
		store->shown.data = (u_char *)store->cfg.shm_path;
		store->shown.len = n;
		if (st->shm_group) {
			n = ngx_strlen(st->shm_group);
			store->cfg.shm_group = ngx_pnalloc(cf->pool, n + 1);
			if (store->cfg.shm_group == NULL)
				return NGX_CONF_ERROR;
			ngx_memcpy(store->cfg.shm_group, st->shm_group, n + 1);
		}
		/* The same file as a zone's or another file's: one store
		 * (made for one number of buckets). */
		stores = smcf->stores.elts;
		for (i = 0; i < smcf->stores.nelts; i++) {
			if (stores[i]->cfg.shm_path == NULL ||
			    ngx_strcmp(stores[i]->cfg.shm_path,
				       store->cfg.shm_path) != 0)
				continue;
			if (stores[i]->cfg.max_keys != store->cfg.max_keys) {
				ngx_conf_log_error(
					NGX_LOG_EMERG, cf, 0,
					"sluice_config: %s:%d: store: "
					"max_keys %uz, but \"%V\" is already "
					"used with %uz buckets",
					p->file.data, p->cfg->store_line,
					store->cfg.max_keys, &store->shown,
					stores[i]->cfg.max_keys);
				return NGX_CONF_ERROR;
			}
			p->store = stores[i];
			return NGX_CONF_OK;
		}
	}
	/* (memory: its file is named at init_main, when the directory is
	 * known.) */
	sp = ngx_array_push(&smcf->stores);
	if (sp == NULL)
		return NGX_CONF_ERROR;
	*sp = store;
	p->store = store;
	return NGX_CONF_OK;
}

/* Loads `file` (a full path) into a policy of the configuration; the
 * engine's message, "FILE:LINE: what is wrong", goes to nginx's log with
 * the directive's own place. */
static ngx_http_sluice_policy_t *
policy_load(ngx_conf_t *cf, ngx_http_sluice_main_conf_t *smcf, ngx_str_t *file)
{
	ngx_http_sluice_policy_t *p, **pp;
	ngx_pool_cleanup_t *cln;
	char err[1024];

	p = ngx_pcalloc(cf->pool, sizeof(*p));
	cln = ngx_pool_cleanup_add(cf->pool, 0);
	if (p == NULL || cln == NULL)
		return NULL;
	p->file = *file;
	err[0] = '\0';
	p->cfg = sluice_config_load((const char *)file->data, err, sizeof(err));
	if (p->cfg == NULL) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "sluice_config: %s",
				   err[0] ? err : "cannot load the file");
		return NULL;
	}
	cln->handler = policy_free;
	cln->data = p;

	/* realip decides the client address (see the top of this file). */
	free(p->cfg->trusted_proxies);
	p->cfg->trusted_proxies = NULL;
	p->cfg->ntrusted = 0;

	if (policy_store(cf, smcf, p) != NGX_CONF_OK)
		return NULL;
	/* The config as the engine holds it; nginx's reload loads a new
	 * policy, so this one is never swapped and never counted. */
	p->live.cfg = p->cfg;
	atomic_init(&p->live.refs, 1);
	p->svc.live = &p->live;
	pp = ngx_array_push(&smcf->policies);
	if (pp == NULL)
		return NULL;
	*pp = p;
	return p;
}

char *ngx_http_sluice_config_cmd(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
	ngx_http_sluice_loc_conf_t *lcf = conf;
	ngx_http_sluice_main_conf_t *smcf;
	ngx_http_sluice_policy_t **pp;
	ngx_str_t *value, file;
	ngx_uint_t i;
	u_char *p;

	if (lcf->policy)
		return "is duplicate";
	value = cf->args->elts;
	if (ngx_strcmp(value[1].data, "off") == 0) {
		lcf->policy = &ngx_http_sluice_policy_off;
		return NGX_CONF_OK;
	}

	file = value[1];
	if (ngx_conf_full_name(cf->cycle, &file, 1) != NGX_OK)
		return NGX_CONF_ERROR;
	/* NUL-terminated: the engine opens it and names it in messages. */
	p = ngx_pnalloc(cf->pool, file.len + 1);
	if (p == NULL)
		return NGX_CONF_ERROR;
	ngx_memcpy(p, file.data, file.len);
	p[file.len] = '\0';
	file.data = p;

	smcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_sluice_module);
	if (smcf->policies.elts == NULL &&
	    ngx_array_init(&smcf->policies, cf->pool, 2,
			   sizeof(ngx_http_sluice_policy_t *)) != NGX_OK)
		return NGX_CONF_ERROR;
	pp = smcf->policies.elts;
	for (i = 0; i < smcf->policies.nelts; i++)
		if (pp[i]->file.len == file.len &&
		    ngx_strncmp(pp[i]->file.data, file.data, file.len) == 0) {
			lcf->policy = pp[i];
			return NGX_CONF_OK;
		}
	lcf->policy = policy_load(cf, smcf, &file);
	return lcf->policy ? NGX_CONF_OK : NGX_CONF_ERROR;
}

char *ngx_http_sluice_config_init_main(ngx_conf_t *cf,
				       ngx_http_sluice_main_conf_t *smcf)
{
	ngx_http_sluice_policy_t **pp = smcf->policies.elts;
	ngx_http_sluice_store_t *store;
	ngx_uint_t i;
	u_char *p;

	for (i = 0; i < smcf->policies.nelts; i++) {
		store = pp[i]->store;
		if (store->cfg.shm_path)
			continue;
		/* A name no zone can have ('@' is not in a zone name), the
		 * same for the same file at every reload. */
		p = ngx_pnalloc(cf->pool,
				smcf->store_dir.len +
					sizeof("/nginx-sluice-config@") + 8);
		if (p == NULL)
			return NGX_CONF_ERROR;
		store->shown.data = p;
		p = ngx_sprintf(
			p, "%V/nginx-sluice-config@%08xD", &smcf->store_dir,
			ngx_crc32_short(pp[i]->file.data, pp[i]->file.len));
		store->shown.len = p - store->shown.data;
		*p = '\0';
		store->cfg.shm_path = (char *)store->shown.data;
	}
	return NGX_CONF_OK;
}

void ngx_http_sluice_config_merge(ngx_http_sluice_loc_conf_t *conf,
				  ngx_http_sluice_loc_conf_t *prev)
{
	/* http{}'s own level is never merged: its values are as set. */
	ngx_uint_t ps = prev->merged ? prev->raw_status : prev->status;
	ngx_uint_t ph = prev->merged ? prev->raw_headers : prev->headers;

	if (conf->policy == NULL)
		conf->policy = prev->policy;
	conf->raw_status =
		conf->status != NGX_CONF_UNSET_UINT ? conf->status : ps;
	conf->raw_headers =
		conf->headers != NGX_CONF_UNSET_UINT ? conf->headers : ph;
	conf->policy_status = conf->raw_status != NGX_CONF_UNSET_UINT
				      ? conf->raw_status
				      : NGX_HTTP_TOO_MANY_REQUESTS;
	conf->policy_headers = conf->raw_headers != NGX_CONF_UNSET_UINT
				       ? conf->raw_headers
				       : NGX_HTTP_SLUICE_HEADERS_ON;
	conf->merged = 1;
}

/* ------------------------------------------------------- the worker */

void ngx_http_sluice_config_worker_open(ngx_cycle_t *cycle)
{
	ngx_http_sluice_main_conf_t *smcf = ngx_http_sluice_cycle_conf(cycle);
	ngx_http_sluice_policy_t **pp;
	ngx_uint_t i;

	if (smcf == NULL)
		return;
	pp = smcf->policies.elts;
	for (i = 0; i < smcf->policies.nelts; i++) {
		/* The store's handle, opened in the master (init_module). */
		pp[i]->svc.backend = pp[i]->store->be;
		/* One take kept for the worker's next request: its arrays,
		 * grown to what requests match, are not allocated again for
		 * every request.  Without it (no memory) each request
		 * allocates its own. */
		pp[i]->svc.spare = sluice_take_new();
		pp[i]->svc.spare_lent = 0;
	}
}

void ngx_http_sluice_config_worker_close(ngx_cycle_t *cycle)
{
	ngx_http_sluice_main_conf_t *smcf = ngx_http_sluice_cycle_conf(cycle);
	ngx_http_sluice_policy_t **pp;
	sluice_svc_t *svc;
	ngx_uint_t i;

	if (smcf == NULL)
		return;
	pp = smcf->policies.elts;
	for (i = 0; i < smcf->policies.nelts; i++) {
		svc = &pp[i]->svc;
		/* A spare still lent is freed when its request gives it
		 * back (it is then no longer the spare). */
		if (!svc->spare_lent)
			sluice_take_free(svc->spare);
		svc->spare = NULL;
		svc->spare_lent = 0;
	}
}

/* -------------------------------------------------------- the request */

/* The index-th line of header field `name` (lower case): the engine
 * reads every line of X-Forwarded-For and refuses an identity sent on
 * two lines. */
static const char *req_header_line(void *ctx, const char *name, size_t index,
				   size_t *len)
{
	ngx_http_request_t *r = ctx;
	ngx_list_part_t *part = &r->headers_in.headers.part;
	ngx_table_elt_t *h = part->elts;
	size_t n = strlen(name);
	ngx_uint_t i;

	for (i = 0;; i++) {
		if (i >= part->nelts) {
			if (part->next == NULL)
				break;
			part = part->next;
			h = part->elts;
			i = 0;
			if (part->nelts == 0)
				continue;
		}
		if (h[i].key.len == n &&
		    ngx_strncmp(h[i].lowcase_key, name, n) == 0 &&
		    index-- == 0) {
			*len = h[i].value.len;
			return (const char *)h[i].value.data;
		}
	}
	return NULL;
}

static const char *req_header(void *ctx, const char *name, size_t *len)
{
	return req_header_line(ctx, name, 0, len);
}

static void ctx_free(ngx_http_sluice_policy_ctx_t *ctx)
{
	sluice_answer_release(&ctx->answer);
	ngx_free(ctx);
}

/* The request's pool goes: its verdict goes with it, unless the store
 * still holds the take (a request ended while its store answers later,
 * the client gone): on_answer frees it then. */
static void policy_cleanup(void *data)
{
	ngx_http_sluice_policy_ctx_t *ctx = data;

	if (ctx->pending) {
		ctx->r = NULL;
		return;
	}
	ctx_free(ctx);
}

/* The request's verdict hangs off its pool, found by its cleanup: it
 * survives an internal redirect (which clears the modules' contexts), so
 * a redirected request is not charged again, and sluice_limit's context
 * keeps the module's slot. */
static ngx_http_sluice_policy_ctx_t *policy_ctx(ngx_http_request_t *r)
{
	ngx_pool_cleanup_t *c;

	for (c = r->pool->cleanup; c; c = c->next)
		if (c->handler == policy_cleanup)
			return c->data;
	return NULL;
}

static void on_answer(void *arg, const sluice_answer_t *a)
{
	ngx_http_sluice_policy_ctx_t *ctx = arg;
	ngx_http_request_t *r = ctx->r;
	ngx_connection_t *c;

	ctx->done = 1;
	if (r == NULL) {
		/* Its request ended first: the take goes back unkept. */
		ngx_free(ctx);
		return;
	}
	sluice_answer_keep(a, &ctx->answer);
	if (!ctx->pending)
		return; /* answered inside decide(): the handler goes on */

	/* Answered from a loop: give back the hold and run the phases
	 * again, which comes back to the handler. */
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

static ngx_int_t add_verdict_headers(ngx_http_request_t *r, ngx_uint_t mode,
				     ngx_http_sluice_policy_ctx_t *ctx)
{
	sluice_buf_t buf = {0};
	ngx_int_t rc;

	if (mode == NGX_HTTP_SLUICE_HEADERS_OFF)
		return NGX_OK;
	sluice_answer_headers(&ctx->answer, &buf);
	if (buf.oom) {
		sluice_buf_free(&buf);
		return NGX_ERROR;
	}
	rc = ngx_http_sluice_header_lines(r, mode, buf.data, buf.len, ctx->hdrs,
					  NGX_HTTP_SLUICE_POLICY_HEADERS,
					  &ctx->nhdrs);
	sluice_buf_free(&buf);
	return rc;
}

/* Acts on a delivered verdict: NGX_DECLINED lets the request go on, a
 * status refuses it. */
static ngx_int_t answer(ngx_http_request_t *r, ngx_http_sluice_loc_conf_t *lcf,
			ngx_http_sluice_policy_ctx_t *ctx)
{
	const sluice_answer_t *a = &ctx->answer;
	char name[256];
	size_t i = 0;

	ctx->answered = 1;
	ctx->dry_run = lcf->dry_run ? 1 : 0;
	/* A shadow rule refuses nothing; what it would have refused is
	 * said where refusals are. */
	while (sluice_answer_shadow_limited(a, &i, name, sizeof(name)))
		ngx_log_error(lcf->log_level, r->connection->log, 0,
			      "sluice: shadow rule \"%s\" of \"%V\" "
			      "would limit the request (not enforced)",
			      name, &ctx->policy->file);

	if (a->kind == SLUICE_ANSWER_STORE_ERROR) {
		/* A fail-closed rule's store failed: as sluice serve. */
		ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
			      "sluice: the store of \"%V\" failed and a rule "
			      "fails closed",
			      &ctx->policy->file);
		if (lcf->dry_run)
			return NGX_DECLINED;
		if (ngx_http_sluice_header_lines(r, NGX_HTTP_SLUICE_HEADERS_ON,
						 "Retry-After: 1\r\n", 16, NULL,
						 0, NULL) != NGX_OK)
			return NGX_HTTP_INTERNAL_SERVER_ERROR;
		return NGX_HTTP_SERVICE_UNAVAILABLE;
	}

	if (a->kind == SLUICE_ANSWER_LIMITED) {
		sluice_answer_policy(a, name, sizeof(name));
		ngx_log_error(lcf->log_level, r->connection->log, 0,
			      "limiting requests%s, retry after %uLms by rule "
			      "\"%s\" of \"%V\"",
			      lcf->dry_run ? ", dry run" : "",
			      (uint64_t)sluice_us_to_ms_ceil(
				      sluice_answer_retry_us(a)),
			      name, &ctx->policy->file);
		if (lcf->dry_run)
			return NGX_DECLINED;
		if (add_verdict_headers(r, lcf->policy_headers, ctx) != NGX_OK)
			return NGX_HTTP_INTERNAL_SERVER_ERROR;
		return lcf->policy_status;
	}

	ctx->charged = 1;
	if (add_verdict_headers(r, lcf->policy_headers, ctx) != NGX_OK)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	return NGX_DECLINED;
}

ngx_int_t ngx_http_sluice_config_handler(ngx_http_request_t *r)
{
	ngx_http_sluice_loc_conf_t *lcf;
	ngx_http_sluice_policy_ctx_t *ctx;
	ngx_http_sluice_policy_t *policy;
	ngx_pool_cleanup_t *cln;
	sluice_decide_error_t err;
	sluice_request_t req;

	if (r != r->main)
		return NGX_DECLINED;
	lcf = ngx_http_get_module_loc_conf(r, ngx_http_sluice_module);
	ctx = policy_ctx(r);
	if (ctx) {
		if (ctx->pending)
			return NGX_AGAIN;
		/* Decided before a redirect or a delay: once per request. */
		if (ctx->answered)
			return NGX_DECLINED;
		return answer(r, lcf, ctx); /* back from a loop */
	}
	if (lcf->policy == NULL || lcf->policy == &ngx_http_sluice_policy_off)
		return NGX_DECLINED;

	/* Off the pool, as the take: a store answering later may outlive
	 * the request (policy_cleanup). */
	cln = ngx_pool_cleanup_add(r->pool, 0);
	if (cln == NULL)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	ctx = ngx_calloc(sizeof(*ctx), r->connection->log);
	if (ctx == NULL)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	policy = lcf->policy;
	ctx->r = r;
	ctx->policy = policy;
	cln->handler = policy_cleanup;
	cln->data = ctx;

	/* What nginx's auth_request gives sluice serve: the method, the
	 * target as sent ($request_uri; the engine leaves its query out),
	 * the header fields, the client address ($remote_addr, after
	 * realip).  Direct: this request itself is decided, whatever
	 * `proxy:` says (its X-Original-URI would be the client's). */
	ngx_memzero(&req, sizeof(req));
	req.method = (const char *)r->method_name.data;
	req.method_len = r->method_name.len;
	req.path = (const char *)r->unparsed_uri.data;
	req.path_len = r->unparsed_uri.len;
	req.header = req_header;
	req.header_line = req_header_line;
	req.header_ctx = r;
	req.peer = r->connection->sockaddr;
	req.direct = 1;

	if (sluice_decide_request(&policy->svc, &policy->live, &req,
				  sluice_now_us(), on_answer, ctx, &err) < 0) {
		ctx->answered = 1; /* out of memory: not decided again */
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	}
	if (!ctx->done) {
		/* Held until on_answer runs the phases again; a client
		 * that goes away meanwhile ends the request. */
		ctx->pending = 1;
		r->main->count++;
		r->read_event_handler = ngx_http_test_reading;
		r->write_event_handler = ngx_http_request_empty_handler;
		return NGX_DONE;
	}
	if (ctx->answer.take == NULL) {
		ctx->answered = 1; /* no rule applies: nothing to limit */
		return NGX_DECLINED;
	}
	return answer(r, lcf, ctx);
}

/* Withdraws the header fields the rules' verdict added (nginx sends no
 * field whose hash is 0). */
static void withdraw_headers(ngx_http_sluice_policy_ctx_t *ctx)
{
	ngx_uint_t i;

	for (i = 0; i < ctx->nhdrs; i++)
		ctx->hdrs[i]->hash = 0;
	ctx->nhdrs = 0;
}

void ngx_http_sluice_config_refund(ngx_http_request_t *r)
{
	ngx_http_sluice_policy_ctx_t *ctx = policy_ctx(r->main);

	if (ctx == NULL || !ctx->charged)
		return;
	ctx->charged = 0;
	sluice_answer_refund(&ctx->answer, sluice_now_us());
	withdraw_headers(ctx);
}

ngx_int_t ngx_http_sluice_config_outranks(ngx_http_request_t *r,
					  const sluice_decision_t *d)
{
	ngx_http_sluice_policy_ctx_t *ctx = policy_ctx(r->main);
	const sluice_decision_t *reported;
	sluice_decision_t mine;

	/* (Headers were added: a rule reported a decision.) */
	if (ctx == NULL || ctx->nhdrs == 0 ||
	    (reported = sluice_answer_decision(&ctx->answer)) == NULL)
		return 0;
	mine = *reported;
	if (sluice_decision_merge(&mine, d)) {
		withdraw_headers(ctx);
		return 0;
	}
	return 1;
}

ngx_int_t ngx_http_sluice_config_decision(ngx_http_request_t *r,
					  ngx_uint_t *status,
					  sluice_decision_t *d,
					  uint64_t *retry_us)
{
	ngx_http_sluice_policy_ctx_t *ctx = policy_ctx(r->main);
	const sluice_decision_t *reported;
	int allowed;

	if (ctx == NULL || !ctx->answered || ctx->answer.take == NULL)
		return 0;
	allowed = ctx->answer.kind == SLUICE_ANSWER_ALLOWED;
	if (allowed) {
		*status = NGX_HTTP_SLUICE_PASSED;
	} else {
		*status = ctx->dry_run ? NGX_HTTP_SLUICE_REJECTED_DRY_RUN
				       : NGX_HTTP_SLUICE_REJECTED;
	}
	ngx_memzero(d, sizeof(*d));
	d->allowed = allowed;
	*retry_us = 0;
	reported = sluice_answer_decision(&ctx->answer);
	if (reported) {
		*d = *reported;
		if (!allowed)
			*retry_us = sluice_answer_retry_us(&ctx->answer);
	}
	return 1;
}
