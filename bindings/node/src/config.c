/*
 * config.c -- a Limiter's store options (checked by index.js) into the
 * store config every host opens a store from (sluice_store_config_t,
 * src/store/store_config.h): the addon then opens it with
 * sluice_backend_open_events(), as `sluice serve` opens its own.
 */
#include "addon.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- reading options */

static int get_string_prop(napi_env env, napi_value obj, const char *name,
			   char **out)
{
	napi_value v;
	napi_valuetype t;
	size_t len;

	*out = NULL;
	if (napi_get_named_property(env, obj, name, &v) != napi_ok ||
	    napi_typeof(env, v, &t) != napi_ok)
		return -1;
	if (t != napi_string)
		return 0;
	if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok)
		return -1;
	*out = malloc(len + 1);
	if (!*out ||
	    napi_get_value_string_utf8(env, v, *out, len + 1, &len) != napi_ok)
		return -1;
	return 0;
}

static unsigned get_uint_prop(napi_env env, napi_value obj, const char *name)
{
	napi_value v;
	uint32_t u = 0;

	if (napi_get_named_property(env, obj, name, &v) == napi_ok)
		napi_get_value_uint32(env, v, &u);
	return u;
}

/* obj[name] into *out when it is an object: 1, 0 when it is not (absent),
 * -1 on a Node-API failure. */
static int get_object_prop(napi_env env, napi_value obj, const char *name,
			   napi_value *out)
{
	napi_valuetype t;

	if (napi_get_named_property(env, obj, name, out) != napi_ok ||
	    napi_typeof(env, *out, &t) != napi_ok)
		return -1;
	return t == napi_object;
}

static void free_strings(char **v, size_t n)
{
	size_t i;

	for (i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* obj[name], an array of strings (checked by index.js), copied into *out
 * (NULL and 0 when it is not an array). */
static int get_strings_prop(napi_env env, napi_value obj, const char *name,
			    char ***out, size_t *n)
{
	napi_value arr;
	bool is_array = false;
	uint32_t len = 0, i;

	*out = NULL;
	*n = 0;
	if (napi_get_named_property(env, obj, name, &arr) != napi_ok ||
	    napi_is_array(env, arr, &is_array) != napi_ok)
		return -1;
	if (!is_array)
		return 0;
	if (napi_get_array_length(env, arr, &len) != napi_ok)
		return -1;
	*out = calloc(len ? len : 1, sizeof(**out));
	if (!*out)
		return -1;
	for (i = 0; i < len; i++) {
		napi_value s;
		size_t slen;

		/* Counted as it goes, so a failure frees what was copied. */
		if (napi_get_element(env, arr, i, &s) != napi_ok ||
		    napi_get_value_string_utf8(env, s, NULL, 0, &slen) !=
			    napi_ok ||
		    !((*out)[i] = malloc(slen + 1)))
			return -1;
		(*n)++;
		if (napi_get_value_string_utf8(env, s, (*out)[i], slen + 1,
					       &slen) != napi_ok)
			return -1;
	}
	return 0;
}

/* ------------------------------------------------------------ the config */

/*
 * redisNew()'s options: {url, seeds[], keyPrefix, timeoutMs, connections,
 * scriptOnly, unref, tls: {caFile, certFile, keyFile, serverName,
 * noVerify}, sentinel: {master, addrs[], user, password, tls}}, as the
 * `store:` section of sluice serve's config would say them: seeds make it
 * a cluster; a tls object turns TLS on.
 */
int addon_redis_config(napi_env env, napi_value v, sluice_store_config_t *cfg)
{
	napi_value t;
	int has;

	memset(cfg, 0, sizeof(*cfg));
	cfg->kind = SLUICE_STORE_REDIS;
	if (get_string_prop(env, v, "url", &cfg->url) < 0 ||
	    get_string_prop(env, v, "keyPrefix", &cfg->key_prefix) < 0 ||
	    get_strings_prop(env, v, "seeds", &cfg->seeds, &cfg->nseeds) < 0)
		return -1;
	if (cfg->nseeds > 0)
		cfg->kind = SLUICE_STORE_REDIS_CLUSTER;
	cfg->timeout_ms = get_uint_prop(env, v, "timeoutMs");
	cfg->connections = get_uint_prop(env, v, "connections");
	if (get_uint_prop(env, v, "scriptOnly"))
		cfg->redis_flags |= SLUICE_REDIS_SCRIPT_ONLY;
	if (get_uint_prop(env, v, "unref"))
		cfg->redis_flags |= SLUICE_REDIS_UNREF;

	if ((has = get_object_prop(env, v, "tls", &t)) < 0)
		return -1;
	if (has) {
		sluice_store_tls_t *tls = &cfg->tls;

		if (get_string_prop(env, t, "caFile", &tls->ca_file) < 0 ||
		    get_string_prop(env, t, "certFile", &tls->cert_file) < 0 ||
		    get_string_prop(env, t, "keyFile", &tls->key_file) < 0 ||
		    get_string_prop(env, t, "serverName", &tls->server_name) <
			    0)
			return -1;
		tls->enabled = 1;
		tls->verify = !get_uint_prop(env, t, "noVerify");
	}

	if ((has = get_object_prop(env, v, "sentinel", &t)) < 0)
		return -1;
	if (has) {
		sluice_store_sentinel_t *sen = &cfg->sentinel;

		if (get_string_prop(env, t, "master", &sen->master) < 0 ||
		    get_string_prop(env, t, "user", &sen->user) < 0 ||
		    get_string_prop(env, t, "password", &sen->password) < 0 ||
		    get_strings_prop(env, t, "addrs", &sen->addrs,
				     &sen->naddrs) < 0)
			return -1;
		sen->tls = get_uint_prop(env, t, "tls") != 0;
	}
	return 0;
}

void addon_config_free(sluice_store_config_t *cfg)
{
	free(cfg->url);
	free(cfg->key_prefix);
	free_strings(cfg->seeds, cfg->nseeds);
	free(cfg->tls.ca_file);
	free(cfg->tls.cert_file);
	free(cfg->tls.key_file);
	free(cfg->tls.server_name);
	free(cfg->sentinel.master);
	free(cfg->sentinel.user);
	free(cfg->sentinel.password);
	free_strings(cfg->sentinel.addrs, cfg->sentinel.naddrs);
	memset(cfg, 0, sizeof(*cfg));
}
