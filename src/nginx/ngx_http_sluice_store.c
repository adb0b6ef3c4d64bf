/*
 * ngx_http_sluice_store.c -- the stores of ngx_http_sluice_module's
 * zones: what store= says, opening them, and the seam for a store that
 * answers from an event loop.
 *
 * A zone decides on the shared-memory store (a file on a tmpfs, the one
 * `sluice serve` opens with `store: {shared: {path}}`): the master opens
 * it before it forks, so every worker maps the same buckets and charges
 * them exactly; the file outlives the master, so a reload (a new cycle,
 * the same file) and a binary upgrade (a new master, the same file) find
 * every bucket as it was.  Everything is called through the store driver
 * interface (store/store.h), so a store that answers later only needs a
 * loop: a Redis store is opened in each worker (init_process) on the
 * worker's own event loop (ngx_sluice_loop.c), one client per worker,
 * and closed when the worker exits; ngx_http_sluice_store_open_loop() is
 * where it gets nginx's.  Its zones' fail= and timeout= are read here
 * too, and what its client says of its nodes goes to the error log.
 */
#include "ngx_http_sluice.h"

#include <string.h>

/* ------------------------------------------------------------- parsing */

/* A NUL-terminated copy of s from the configuration's pool. */
static char *conf_strdup(ngx_conf_t *cf, const u_char *s, size_t n)
{
	char *p = ngx_pnalloc(cf->pool, n + 1);

	if (p) {
		ngx_memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

/* --------------------------------------------------------------- Redis */

/*
 * The Redis stores, as `sluice serve`'s store: section names them, each
 * checked by the same code (the client's URL parser,
 * sluice_redis_url_check(), which is what serve's config loader and the
 * client itself call), so what nginx -t accepts is what the workers
 * connect with:
 *   redis://[user:password@]host:port[/db], rediss://... (TLS, the
 *   system's CAs, the host's name verified), unix:///path[?db=N]:
 *     store.redis.url;
 *   cluster:SEED,SEED...: store.redis_cluster.seeds, each "host:port",
 *     "redis://host:port" or "rediss://host:port" (one rediss: TLS
 *     towards every node);
 *   sentinel://[user:password@]host:port,host:port.../MASTER[/db]:
 *     store.redis.sentinel (addrs and master) with the master's
 *     credentials and db (store.redis.url's); sentinels:// reaches the
 *     Sentinels and the master over TLS.
 * A message never shows a password (sluice_redis_url_mask()).
 */

/* "host:port" with a port from 1 to 65535 and nothing else (as serve's
 * seeds and Sentinel addresses). */
static int is_host_port(const char *s, size_t len)
{
	const char *colon = NULL, *p;
	ngx_int_t port;

	for (p = s; p < s + len; p++) {
		if (*p == '/' || *p == '@' || *p == ',')
			return 0;
		if (*p == ':')
			colon = p;
	}
	if (colon == NULL || colon == s)
		return 0;
	port = ngx_atoi((u_char *)colon + 1, s + len - colon - 1);
	return port >= 1 && port <= 65535;
}

/* TLS towards Redis, as serve's config has it by default: the server's
 * certificate and name verified (a zeroed verify would accept any
 * certificate, store_config.h). */
static void tls_on(ngx_http_sluice_store_t *store)
{
	store->cfg.tls.enabled = 1;
	store->cfg.tls.verify = 1;
}

static char *parse_url(char *url, ngx_http_sluice_store_t *store)
{
	static char why[300];

	if (sluice_redis_url_check(url, why, sizeof(why)) < 0)
		return why;
	store->cfg.kind = SLUICE_STORE_REDIS;
	store->cfg.url = url;
	if (ngx_strncasecmp((u_char *)url, (u_char *)"rediss://", 9) == 0)
		tls_on(store);
	return NGX_CONF_OK;
}

/* Splits a comma-separated list in place: its items, counted in *n. */
static char **split_list(ngx_conf_t *cf, char *list, size_t *n)
{
	char **items, *p;
	size_t count = 1, i = 0;

	for (p = list; *p; p++)
		count += *p == ',';
	items = ngx_pcalloc(cf->pool, count * sizeof(char *));
	if (items == NULL)
		return NULL;
	items[i++] = list;
	for (p = list; *p; p++)
		if (*p == ',') {
			*p = '\0';
			items[i++] = p + 1;
		}
	*n = count;
	return items;
}

static char *parse_cluster(ngx_conf_t *cf, char *list,
			   ngx_http_sluice_store_t *store, u_char *shown,
			   size_t shown_len)
{
	static char why[300];
	char **seeds, *hp, masked[160];
	size_t i, n;
	u_char *p, *end = shown + shown_len - 1;

	seeds = split_list(cf, list, &n);
	if (seeds == NULL)
		return NGX_CONF_ERROR;
	/* Shown seed by seed: each may carry credentials. */
	p = ngx_snprintf(shown, end - shown, "cluster:");
	for (i = 0; i < n; i++) {
		sluice_redis_url_mask(seeds[i], masked, sizeof(masked));
		p = ngx_snprintf(p, end - p, "%s%s", i ? "," : "", masked);
	}
	*p = '\0';
	for (i = 0; i < n; i++) {
		hp = seeds[i];
		if (ngx_strncasecmp((u_char *)hp, (u_char *)"redis://", 8) ==
		    0) {
			hp += 8;
		} else if (ngx_strncasecmp((u_char *)hp, (u_char *)"rediss://",
					   9) == 0) {
			hp += 9;
			tls_on(store);
		}
		if (!is_host_port(hp, ngx_strlen(hp)) ||
		    sluice_redis_url_check(seeds[i], NULL, 0) < 0) {
			sluice_redis_url_mask(seeds[i], masked, sizeof(masked));
			ngx_snprintf((u_char *)why, sizeof(why),
				     "cluster seed \"%s\" is not host:port; "
				     "expected \"host:port\", "
				     "\"redis://host:port\" or "
				     "\"rediss://host:port\"%Z",
				     masked);
			return why;
		}
	}
	store->cfg.kind = SLUICE_STORE_REDIS_CLUSTER;
	store->cfg.seeds = seeds;
	store->cfg.nseeds = n;
	return NGX_CONF_OK;
}

static char *parse_sentinel(ngx_conf_t *cf, char *url,
			    ngx_http_sluice_store_t *store)
{
	static char why[300];
	int tls = url[8] == 's' || url[8] == 'S';
	char *p = url + (tls ? 12 : 11), *at = NULL, *slash, *q, *master;
	char *db = NULL, *master_url, **addrs;
	size_t i, n;

	/* The userinfo ends at the last '@' before the path (a password
	 * may hold '@'), as the client's URL parser reads it. */
	slash = ngx_strchr(p, '/');
	for (q = p; *q && q != slash; q++)
		if (*q == '@')
			at = q;
	if (at) {
		/* A password may hold '/': the path starts after '@'. */
		slash = ngx_strchr(at, '/');
	}
	if (slash == NULL || slash[1] == '\0')
		return "no master name; expected "
		       "sentinel://[user:password@]host:port,.../MASTER[/db]";
	*slash = '\0';
	master = slash + 1;
	if ((q = ngx_strchr(master, '/'))) {
		*q = '\0';
		db = q + 1;
	}
	addrs = split_list(cf, at ? at + 1 : p, &n);
	if (addrs == NULL)
		return NGX_CONF_ERROR;
	for (i = 0; i < n; i++)
		if (!is_host_port(addrs[i], ngx_strlen(addrs[i]))) {
			ngx_snprintf((u_char *)why, sizeof(why),
				     "sentinel address \"%s\" is not "
				     "host:port, e.g. 10.0.0.1:26379%Z",
				     addrs[i]);
			return why;
		}
	/* The master's credentials and db, in the URL serve would be
	 * given with a Sentinel (its host is not used: the Sentinels name
	 * the master). */
	if (at || db) {
		master_url = ngx_pnalloc(cf->pool, ngx_strlen(url) + 32);
		if (master_url == NULL)
			return NGX_CONF_ERROR;
		if (at)
			*at = '\0';
		ngx_sprintf((u_char *)master_url, "%s://%s%s127.0.0.1%s%s%Z",
			    tls ? "rediss" : "redis", at ? p : "",
			    at ? "@" : "", db ? "/" : "", db ? db : "");
		if (sluice_redis_url_check(master_url, why, sizeof(why)) < 0)
			return why;
		store->cfg.url = master_url;
	}
	store->cfg.kind = SLUICE_STORE_REDIS;
	store->cfg.sentinel.master = master;
	store->cfg.sentinel.addrs = addrs;
	store->cfg.sentinel.naddrs = n;
	store->cfg.sentinel.tls = tls;
	if (tls)
		tls_on(store);
	return NGX_CONF_OK;
}

char *ngx_http_sluice_store_parse(ngx_conf_t *cf, ngx_http_sluice_zone_t *zone,
				  ngx_str_t *value, ngx_str_t *dir,
				  ngx_http_sluice_store_t *store)
{
	static u_char msg[512];
	u_char shown[256];
	char *url, *rv;
	size_t n;

	ngx_memzero(store, sizeof(*store));
	store->cfg.kind = SLUICE_STORE_SHARED;
	store->cfg.max_keys = zone->size / NGX_HTTP_SLUICE_BUCKET_BYTES;

	if (value->len == 0) {
		/* The zone's own file, named from the zone; the directory
		 * is known once the whole http block is read (see the
		 * module's init_main_conf), so the path is filled then. */
		return NGX_CONF_OK;
	}

	if (value->len > 7 && ngx_strncmp(value->data, "shared:", 7) == 0) {
		if (value->data[7] != '/') {
			ngx_snprintf(
				msg, sizeof(msg),
				"store=\"%V\": the shared-memory file must be "
				"an absolute path (shared:/dev/shm/NAME)%Z",
				value);
			return (char *)msg;
		}
		store->cfg.shm_path =
			conf_strdup(cf, value->data + 7, value->len - 7);
		if (store->cfg.shm_path == NULL)
			return NGX_CONF_ERROR;
		store->shown = *value;
		return NGX_CONF_OK;
	}

	url = conf_strdup(cf, value->data, value->len);
	if (url == NULL)
		return NGX_CONF_ERROR;
	sluice_redis_url_mask(url, (char *)shown, sizeof(shown));
	if (ngx_strncasecmp(value->data, (u_char *)"cluster:", 8) == 0 &&
	    value->len > 8)
		rv = parse_cluster(cf, url + 8, store, shown, sizeof(shown));
	else if (ngx_strncasecmp(value->data, (u_char *)"sentinel://", 11) ==
			 0 ||
		 ngx_strncasecmp(value->data, (u_char *)"sentinels://", 12) ==
			 0)
		rv = parse_sentinel(cf, url, store);
	else if (ngx_strncasecmp(value->data, (u_char *)"redis://", 8) == 0 ||
		 ngx_strncasecmp(value->data, (u_char *)"rediss://", 9) == 0 ||
		 ngx_strncasecmp(value->data, (u_char *)"unix://", 7) == 0)
		rv = parse_url(url, store);
	else
		rv = "unknown store (expected shared:PATH, redis://HOST:PORT, "
		     "rediss://HOST:PORT, unix:///PATH, cluster:HOST:PORT,... "
		     "or sentinel://HOST:PORT,.../MASTER)";
	n = ngx_strlen(shown);
	if (rv == NGX_CONF_ERROR)
		return rv;
	if (rv != NGX_CONF_OK) {
		ngx_snprintf(msg, sizeof(msg), "store=\"%*s\": %s%Z", n, shown,
			     rv);
		return (char *)msg;
	}
	store->text = *value;
	store->shown.len = n;
	store->shown.data = (u_char *)conf_strdup(cf, shown, n);
	if (store->shown.data == NULL)
		return NGX_CONF_ERROR;
	return NGX_CONF_OK;
}

/* ------------------------------------------------------------- opening */

static void stores_close(void *data)
{
	ngx_array_t *stores = data;
	ngx_http_sluice_store_t **s = stores->elts;
	ngx_uint_t i;

	for (i = 0; i < stores->nelts; i++)
		if (s[i]->opened) {
			sluice_backend_close(&s[i]->be);
			s[i]->opened = 0;
		}
}

ngx_int_t ngx_http_sluice_stores_open(ngx_cycle_t *cycle,
				      ngx_http_sluice_main_conf_t *smcf)
{
	ngx_http_sluice_store_t **s = smcf->stores.elts;
	ngx_pool_cleanup_t *cln;
	char err[512];
	ngx_uint_t i;
	int rc;

	cln = ngx_pool_cleanup_add(cycle->pool, 0);
	if (cln == NULL)
		return NGX_ERROR;
	cln->handler = stores_close;
	cln->data = &smcf->stores;

	for (i = 0; i < smcf->stores.nelts; i++) {
		if (s[i]->cfg.kind != SLUICE_STORE_SHARED)
			continue; /* opened in each worker, on its loop */
		err[0] = '\0';
		rc = sluice_backend_open_events(&s[i]->be, &s[i]->cfg, NULL,
						NULL, NULL, NULL, err,
						sizeof(err));
		if (rc < 0) {
			ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
				      "sluice: store \"%V\" (%uz buckets): %s",
				      &s[i]->shown, s[i]->cfg.max_keys,
				      err[0] ? err : sluice_strerror(rc));
			return NGX_ERROR;
		}
		s[i]->opened = 1;
	}
	return NGX_OK;
}

/* --------------------------------------------------------- zone options */

char *ngx_http_sluice_store_option(ngx_conf_t *cf, ngx_http_sluice_zone_t *zone,
				   ngx_str_t *value)
{
	static u_char msg[300];
	ngx_http_sluice_store_t *store = zone->store;
	ngx_str_t v;
	ngx_int_t ms;

	if (store->cfg.kind != SLUICE_STORE_REDIS &&
	    store->cfg.kind != SLUICE_STORE_REDIS_CLUSTER) {
		ngx_snprintf(msg, sizeof(msg),
			     "\"%V\" is for a Redis store (store=redis://...); "
			     "zone \"%V\" decides on \"%V\", which does not "
			     "fail%Z",
			     value, &zone->name, &store->shown);
		return (char *)msg;
	}
	if (ngx_strncmp(value->data, "fail=", 5) == 0) {
		v.data = value->data + 5;
		v.len = value->len - 5;
		if (v.len == 4 && ngx_strncmp(v.data, "open", 4) == 0)
			zone->fail = NGX_HTTP_SLUICE_FAIL_OPEN;
		else if (v.len == 6 && ngx_strncmp(v.data, "closed", 6) == 0)
			zone->fail = NGX_HTTP_SLUICE_FAIL_CLOSED;
		else if (v.len == 5 && ngx_strncmp(v.data, "local", 5) == 0)
			zone->fail = NGX_HTTP_SLUICE_FAIL_LOCAL;
		else {
			ngx_snprintf(msg, sizeof(msg),
				     "invalid \"%V\" (expected fail=open, "
				     "fail=closed or fail=local)%Z",
				     value);
			return (char *)msg;
		}
		return NGX_CONF_OK;
	}
	/* timeout=MS: the store's, so the zones sharing a store agree. */
	v.data = value->data + 8;
	v.len = value->len - 8;
	ms = ngx_atoi(v.data, v.len);
	if (ms < 1 || ms > 60000) {
		ngx_snprintf(msg, sizeof(msg),
			     "invalid \"%V\" (milliseconds, 1 to 60000)%Z",
			     value);
		return (char *)msg;
	}
	if (store->timeout_ms != 0 && store->timeout_ms != (ngx_uint_t)ms) {
		ngx_snprintf(msg, sizeof(msg),
			     "\"%V\" differs from timeout=%ui given for the "
			     "same store in %s:%ui%Z",
			     value, store->timeout_ms, store->timeout_file,
			     store->timeout_line);
		return (char *)msg;
	}
	store->timeout_ms = (ngx_uint_t)ms;
	store->timeout_file = cf->conf_file->file.name.data;
	store->timeout_line = cf->conf_file->line;
	store->cfg.timeout_ms = (unsigned)ms;
	return NGX_CONF_OK;
}

/* -------------------------------------------------------- in the workers */

/*
 * Each worker opens its own client of each Redis store, on its own loop
 * (one connection per worker per Redis node), and the zones' fail=local
 * buckets beside it.  What a client says of its nodes (up, down, a
 * password refused, a certificate that does not verify) goes to the
 * error log: the client tells changes only, so each change is one line
 * per worker, never one per request or per reconnection attempt.
 */

static sluice_loop_t *worker_loop;

static void on_store_event(void *arg, const sluice_redis_event_t *ev)
{
	ngx_http_sluice_store_t *store = arg;
	ngx_uint_t level;

	switch (ev->kind) {
	case SLUICE_REDIS_EV_CONNECTED:
	case SLUICE_REDIS_EV_BREAKER_CLOSED:
	case SLUICE_REDIS_EV_MASTER_CHANGED:
		level = NGX_LOG_NOTICE;
		break;
	case SLUICE_REDIS_EV_SCRIPT_RELOADED:
	case SLUICE_REDIS_EV_SLOTS_CHANGED:
		level = NGX_LOG_INFO;
		break;
	case SLUICE_REDIS_EV_BREAKER_OPEN:
	case SLUICE_REDIS_EV_TIMEOUT:
	case SLUICE_REDIS_EV_EVICTION:
		level = NGX_LOG_WARN;
		break;
	default: /* auth refused, unreachable, TLS, no master, refused */
		level = NGX_LOG_ERR;
		break;
	}
	/* The node is "host:port", the detail redacted by the client: no
	 * credentials reach the log. */
	ngx_log_error(level, ngx_cycle->log, 0,
		      "sluice: store \"%V\": redis %s %s%s%s", &store->shown,
		      ev->node ? ev->node : "",
		      sluice_redis_event_name(ev->kind),
		      ev->detail && ev->detail[0] ? ": " : "",
		      ev->detail ? ev->detail : "");
}

ngx_int_t ngx_http_sluice_store_open_loop(ngx_http_sluice_store_t *store,
					  ngx_cycle_t *cycle)
{
	sluice_store_events_t *events;
	char err[512];
	int rc;

	if (worker_loop == NULL)
		worker_loop = ngx_sluice_loop_new(cycle->log);
	events = ngx_pcalloc(cycle->pool, sizeof(*events));
	if (worker_loop == NULL || events == NULL) {
		ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
			      "sluice: store \"%V\": out of memory",
			      &store->shown);
		return NGX_ERROR;
	}
	events->on_event = on_store_event;
	events->arg = store;
	/* Unref'd: only calls waiting for an answer (their deadline, at
	 * most timeout=) hold a worker that is shutting down. */
	store->cfg.redis_flags |= SLUICE_REDIS_UNREF;
	err[0] = '\0';
	rc = sluice_backend_open_loop(&store->be, &store->cfg, worker_loop,
				      events, err, sizeof(err));
	if (rc < 0) {
		ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
			      "sluice: store \"%V\": %s", &store->shown,
			      err[0] ? err : sluice_strerror(rc));
		return NGX_ERROR;
	}
	store->opened = 1;
	return NGX_OK;
}

/* The worker's own buckets for the store's fail=local zones: as many as
 * their zones' sizes hold together. */
static ngx_int_t open_local(ngx_http_sluice_main_conf_t *smcf,
			    ngx_http_sluice_store_t *store, ngx_cycle_t *cycle)
{
	ngx_http_sluice_zone_t **z = smcf->zones.elts;
	sluice_memstore_t *mem;
	size_t keys = 0;
	char err[256];
	ngx_uint_t i;

	for (i = 0; i < smcf->zones.nelts; i++)
		if (z[i]->store == store &&
		    z[i]->fail == NGX_HTTP_SLUICE_FAIL_LOCAL)
			keys += z[i]->size / NGX_HTTP_SLUICE_BUCKET_BYTES;
	if (keys == 0)
		return NGX_OK;
	if (sluice_memstore_open(&mem, keys, err, sizeof(err)) < 0) {
		ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
			      "sluice: store \"%V\": fail=local: %s",
			      &store->shown, err);
		return NGX_ERROR;
	}
	sluice_backend_memory(&store->local, mem);
	store->local_opened = 1;
	return NGX_OK;
}

ngx_int_t ngx_http_sluice_stores_worker_open(ngx_cycle_t *cycle)
{
	ngx_http_sluice_main_conf_t *smcf = ngx_http_sluice_cycle_conf(cycle);
	ngx_http_sluice_store_t **s;
	ngx_uint_t i;

	if (smcf == NULL)
		return NGX_OK;
	s = smcf->stores.elts;
	for (i = 0; i < smcf->stores.nelts; i++) {
		if (s[i]->cfg.kind != SLUICE_STORE_REDIS &&
		    s[i]->cfg.kind != SLUICE_STORE_REDIS_CLUSTER)
			continue;
		if (ngx_http_sluice_store_open_loop(s[i], cycle) != NGX_OK ||
		    open_local(smcf, s[i], cycle) != NGX_OK)
			return NGX_ERROR;
	}
	return NGX_OK;
}

/* A worker exiting: each client fails its calls still waiting (their
 * requests are past saving: the worker runs no more turns) and releases
 * its sockets, so nginx finds none of them left open. */
void ngx_http_sluice_stores_worker_close(ngx_cycle_t *cycle)
{
	ngx_http_sluice_main_conf_t *smcf = ngx_http_sluice_cycle_conf(cycle);
	ngx_http_sluice_store_t **s;
	ngx_uint_t i;

	if (smcf == NULL)
		return;
	ngx_http_sluice_exiting = 1;
	s = smcf->stores.elts;
	for (i = 0; i < smcf->stores.nelts; i++) {
		if (s[i]->cfg.kind != SLUICE_STORE_REDIS &&
		    s[i]->cfg.kind != SLUICE_STORE_REDIS_CLUSTER)
			continue;
		if (s[i]->opened) {
			sluice_backend_close(&s[i]->be);
			s[i]->opened = 0;
		}
		if (s[i]->local_opened) {
			sluice_memstore_free(s[i]->local.local);
			s[i]->local_opened = 0;
		}
	}
	if (worker_loop) {
		ngx_sluice_loop_free(worker_loop);
		worker_loop = NULL;
	}
}
