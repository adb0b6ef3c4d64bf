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
 * loop: ngx_http_sluice_store_open_loop() is where it gets nginx's.
 */
#include "ngx_http_sluice.h"

#include <string.h>

/* ------------------------------------------------------------- parsing */

/* Copies `url` into buf with the password of "scheme://user:password@"
 * replaced by "***", so that no message carries it. */
static void mask_url(const ngx_str_t *url, u_char *buf, size_t len)
{
	u_char *p, *end = url->data + url->len, *host, *at, *colon;

	p = ngx_strlcasestrn(url->data, end, (u_char *)"://", 3 - 1);
	host = p ? p + 3 : url->data;
	at = NULL;
	for (p = host; p < end && *p != '/'; p++)
		if (*p == '@')
			at = p;
	colon = NULL;
	if (at)
		for (p = host; p < at; p++)
			if (*p == ':') {
				colon = p;
				break;
			}
	if (at == NULL) {
		ngx_snprintf(buf, len, "%V%Z", url);
	} else if (colon) {
		ngx_snprintf(buf, len, "%*s:***%*s%Z",
			     (size_t)(colon - url->data), url->data,
			     (size_t)(end - at), at);
	} else {
		/* "redis://password@host": a lone secret before '@'. */
		ngx_snprintf(buf, len, "%*s***%*s%Z",
			     (size_t)(host - url->data), url->data,
			     (size_t)(end - at), at);
	}
	buf[len - 1] = '\0';
}

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

char *ngx_http_sluice_store_parse(ngx_conf_t *cf, ngx_http_sluice_zone_t *zone,
				  ngx_str_t *value, ngx_str_t *dir,
				  ngx_http_sluice_store_t *store)
{
	static u_char msg[512];
	u_char shown[256];
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

	mask_url(value, shown, sizeof(shown));
	n = value->len;
	if ((n > 8 &&
	     ngx_strncasecmp(value->data, (u_char *)"redis://", 8) == 0) ||
	    (n > 9 &&
	     ngx_strncasecmp(value->data, (u_char *)"rediss://", 9) == 0)) {
		/* Parsed and kept, so that the loop adapter has what it
		 * needs; refused until the module can run the Redis
		 * client on nginx's loop (ngx_http_sluice_store_open_loop). */
		store->cfg.kind = SLUICE_STORE_REDIS;
		store->cfg.url = conf_strdup(cf, value->data, value->len);
		store->shown.len = ngx_strlen(shown);
		store->shown.data =
			(u_char *)conf_strdup(cf, shown, store->shown.len);
		if (store->cfg.url == NULL || store->shown.data == NULL)
			return NGX_CONF_ERROR;
		ngx_snprintf(msg, sizeof(msg),
			     "store=\"%s\": a Redis store needs the Redis "
			     "client's nginx loop adapter, which this build of "
			     "the module does not have%Z",
			     shown);
		return (char *)msg;
	}

	ngx_snprintf(msg, sizeof(msg),
		     "store=\"%s\": unknown store (expected shared:PATH, "
		     "redis://HOST:PORT or rediss://HOST:PORT)%Z",
		     shown);
	return (char *)msg;
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

ngx_int_t ngx_http_sluice_store_open_loop(ngx_http_sluice_store_t *store,
					  ngx_cycle_t *cycle)
{
	/* Configurations with a Redis store are refused when they are
	 * read (ngx_http_sluice_store_parse), so no worker gets here
	 * until the adapter does. */
	ngx_log_error(
		NGX_LOG_EMERG, cycle->log, 0,
		"sluice: store \"%V\" needs the Redis client's nginx loop "
		"adapter",
		&store->shown);
	return NGX_ERROR;
}
