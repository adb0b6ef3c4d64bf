/*
 * addon.c -- libsluice for Node.js (Node-API): glue only.
 *
 * The decisions are libsluice's: policies parsed by sluice_limit_parse(),
 * keys built by sluice_key_make() (so a Node app and `sluice serve` reach
 * the same buckets), takes decided by the memory store, the host's
 * shared-memory store or libsluice's own Redis client.  The Redis client runs
 * on Node's own event loop (napi_get_uv_event_loop()); the addon does not link
 * libuv, so its uv_* calls bind to the libuv that Node carries.  The
 * client's TLS (OpenSSL) is linked as -lssl -lcrypto, but a node that
 * exports its own OpenSSL 3 (the official binaries do) is searched first:
 * every OpenSSL call of the addon then binds to node's copy, consistently
 * (LD_DEBUG=bindings shows it), and the system's libssl stays unused.
 *
 * The JavaScript side (index.js) validates arguments and shapes results;
 * the functions here take already-checked values and answer in the
 * cheapest form: the memory store writes its decision into a Float64Array
 * the caller owns (no object per call), the Redis store calls a function
 * with the decision as plain numbers.
 *
 * Decision layout (both paths), in this order:
 *   limit, remaining, retry_after_ms, reset_ms, which
 * retry_after_ms is Infinity when the cost can never pass (cost above the
 * capacity); `which` is the index of the most restrictive limit.
 */
#define NAPI_VERSION 8
#include <node_api.h>

#include "sluice.h"
#include "sluice_redis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys up to this many bytes are copied on the stack. */
#define KEY_STACK_MAX 1024

#define DECISION_FIELDS 5

/* ------------------------------------------------------------- helpers */

#define CHECK(env, call)                                                       \
	do {                                                                   \
		if ((call) != napi_ok)                                         \
			return throw_last(env);                                \
	} while (0)

static napi_value throw_last(napi_env env)
{
	const napi_extended_error_info *info = NULL;
	bool pending = false;

	napi_is_exception_pending(env, &pending);
	if (!pending) {
		napi_get_last_error_info(env, &info);
		napi_throw_error(env, "ERR_SLUICE_NAPI",
				 info && info->error_message
					 ? info->error_message
					 : "Node-API call failed");
	}
	return NULL;
}

static void *get_external(napi_env env, napi_value v)
{
	void *p = NULL;

	if (napi_get_value_external(env, v, &p) != napi_ok)
		return NULL;
	return p;
}

static double ms_ceil(uint64_t us)
{
	return (double)(us / 1000 + (us % 1000 != 0));
}

static void decision_numbers(const sluice_decision_t *d, size_t which,
			     double out[DECISION_FIELDS])
{
	out[0] = (double)d->limit;
	out[1] = (double)d->remaining;
	out[2] = d->never || d->retry_after_us == UINT64_MAX
			 ? INFINITY
			 : ms_ceil(d->retry_after_us);
	out[3] = ms_ceil(d->reset_after_us);
	out[4] = (double)which;
}

/* ------------------------------------------------------------- policies */

typedef struct policy_s {
	char name[SLUICE_KEY_NAME_MAX + 1];
	size_t nlimits;
	sluice_limit_t limits[SLUICE_MAX_LIMITS];
} policy_t;

static void free_ptr(napi_env env, void *data, void *hint)
{
	free(data);
}

/*
 * policyNew(name, capacities[], rates[]) -> [external, windows_s[]]
 * Capacities are whole numbers already checked by index.js; rates are
 * strings in the core's syntax.  Errors are RangeErrors with the core's
 * own message.
 */
static napi_value policy_new(napi_env env, napi_callback_info info)
{
	size_t argc = 3, i;
	napi_value argv[3], ext, windows, result;
	uint32_t n = 0, n2 = 0;
	policy_t *p;
	char err[256];

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env, napi_get_array_length(env, argv[1], &n));
	CHECK(env, napi_get_array_length(env, argv[2], &n2));
	if (n == 0 || n != n2 || n > SLUICE_MAX_LIMITS) {
		snprintf(err, sizeof(err),
			 "a policy needs 1 to %d limits, got %u",
			 SLUICE_MAX_LIMITS, n);
		napi_throw_range_error(env, "ERR_SLUICE_POLICY", err);
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		napi_throw_error(env, "ERR_SLUICE_NOMEM", "out of memory");
		return NULL;
	}
	if (napi_get_value_string_utf8(env, argv[0], p->name, sizeof(p->name),
				       NULL) != napi_ok)
		goto napi_fail;
	if (napi_create_array_with_length(env, n, &windows) != napi_ok)
		goto napi_fail;
	for (i = 0; i < n; i++) {
		napi_value cv, rv, w;
		char rate[128];
		size_t ratelen = 0;
		double cap;
		sluice_rate_t r;
		sluice_limit_t *l = &p->limits[i];
		int rc;

		if (napi_get_element(env, argv[1], (uint32_t)i, &cv) !=
			    napi_ok ||
		    napi_get_value_double(env, cv, &cap) != napi_ok ||
		    napi_get_element(env, argv[2], (uint32_t)i, &rv) !=
			    napi_ok ||
		    napi_get_value_string_utf8(env, rv, rate, sizeof(rate),
					       &ratelen) != napi_ok)
			goto napi_fail;
		/* A cut rate could read as another one: refuse it whole. */
		if (ratelen + 4 >= sizeof(rate)) {
			rc = SLUICE_EINVAL;
			snprintf(err, sizeof(err), "rate is too long");
		} else {
			rc = sluice_rate_parse(rate, &r, err, sizeof(err));
		}
		if (rc == 0)
			rc = sluice_limit_init(l, (uint64_t)cap, &r, err,
					       sizeof(err));
		if (rc < 0) {
			char msg[320];

			snprintf(msg, sizeof(msg), "limit %zu: %s", i, err);
			free(p);
			napi_throw_range_error(env, "ERR_SLUICE_POLICY", msg);
			return NULL;
		}
		/* The window of RateLimit-Policy: time from empty to full,
		 * in whole seconds rounded up (as sluice serve says it). */
		{
			uint64_t us = l->tau / l->rate.per +
				      (l->tau % l->rate.per != 0);
			double s = (double)(us / 1000000 + (us % 1000000 != 0));

			if (napi_create_double(env, s, &w) != napi_ok ||
			    napi_set_element(env, windows, (uint32_t)i, w) !=
				    napi_ok)
				goto napi_fail;
		}
	}
	p->nlimits = n;
	if (napi_create_external(env, p, free_ptr, NULL, &ext) != napi_ok)
		goto napi_fail;
	CHECK(env, napi_create_array_with_length(env, 2, &result));
	CHECK(env, napi_set_element(env, result, 0, ext));
	CHECK(env, napi_set_element(env, result, 1, windows));
	return result;
napi_fail:
	free(p);
	return throw_last(env);
}

/* ---------------------------------------------------------------- keys */

/*
 * The store key of (policy, key): "<policy name>\x1f<key>", built by
 * libsluice so that `sluice serve` builds the same one.  key is a string
 * or a Buffer (checked by index.js).
 */
static int make_key(napi_env env, napi_value key, const policy_t *p,
		    char out[SLUICE_KEY_MAX], size_t *outlen)
{
	napi_valuetype t;
	char stack[KEY_STACK_MAX];
	const void *part;
	size_t len = 0;
	char *heap = NULL;

	if (napi_typeof(env, key, &t) != napi_ok)
		return -1;
	if (t == napi_string) {
		if (napi_get_value_string_utf8(env, key, stack, sizeof(stack),
					       &len) != napi_ok)
			return -1;
		if (len + 4 >= sizeof(stack)) {
			/* Possibly cut (at a character boundary, so maybe
			 * short of the end of the buffer): get it whole. */
			if (napi_get_value_string_utf8(env, key, NULL, 0,
						       &len) != napi_ok)
				return -1;
			heap = malloc(len + 1);
			if (!heap ||
			    napi_get_value_string_utf8(env, key, heap, len + 1,
						       &len) != napi_ok) {
				free(heap);
				return -1;
			}
			part = heap;
		} else {
			part = stack;
		}
	} else {
		void *data = NULL;

		if (napi_get_buffer_info(env, key, &data, &len) != napi_ok)
			return -1;
		part = data;
	}
	*outlen = sluice_key_make(p->name, &part, &len, 1, out);
	free(heap);
	return 0;
}

/*
 * The arguments every take shares: (store, key, policy, cost, ...).
 * Returns the store's pointer with the key built and the cost read, or
 * NULL with an exception pending.
 */
static void *take_args(napi_env env, napi_value *argv, policy_t **p,
		       char key[SLUICE_KEY_MAX], size_t *keylen, uint64_t *cost)
{
	void *store = get_external(env, argv[0]);
	double c;

	*p = get_external(env, argv[2]);
	if (!store || !*p ||
	    napi_get_value_double(env, argv[3], &c) != napi_ok ||
	    make_key(env, argv[1], *p, key, keylen) < 0) {
		throw_last(env);
		return NULL;
	}
	*cost = (uint64_t)c;
	return store;
}

/* -------------------------------------------------------- memory store */

static void free_memstore(napi_env env, void *data, void *hint)
{
	sluice_memstore_free(data);
}

/* memoryNew(maxKeys) -> external */
static napi_value memory_new(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], ext;
	double max_keys;
	sluice_memstore_t *s;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env, napi_get_value_double(env, argv[0], &max_keys));
	s = sluice_memstore_new((size_t)max_keys);
	if (!s) {
		napi_throw_error(env, "ERR_SLUICE_NOMEM",
				 "out of memory for the memory store");
		return NULL;
	}
	if (napi_create_external(env, s, free_memstore, NULL, &ext) !=
	    napi_ok) {
		sluice_memstore_free(s);
		return throw_last(env);
	}
	return ext;
}

/* ------------------------------------------------- shared-memory store */

static void free_shmstore(napi_env env, void *data, void *hint)
{
	sluice_shmstore_close(data);
}

/* shmNew(path, maxKeys) -> external; throws the store's message (which
 * names the file) when it cannot be opened or is of another layout. */
static napi_value shm_new(napi_env env, napi_callback_info info)
{
	size_t argc = 2, len = 0;
	napi_value argv[2], ext;
	double max_keys;
	sluice_shmstore_t *s;
	char path[4096], err[512];
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env, napi_get_value_string_utf8(env, argv[0], path, sizeof(path),
					      &len));
	CHECK(env, napi_get_value_double(env, argv[1], &max_keys));
	if (len >= sizeof(path) - 1) {
		napi_throw_range_error(env, "ERR_SLUICE_STORE",
				       "store.shared.path is too long");
		return NULL;
	}
	rc = sluice_shmstore_open(&s, path, (size_t)max_keys, err, sizeof(err));
	if (rc != 0) {
		napi_throw_error(env, "ERR_SLUICE_STORE", err);
		return NULL;
	}
	if (napi_create_external(env, s, free_shmstore, NULL, &ext) !=
	    napi_ok) {
		sluice_shmstore_close(s);
		return throw_last(env);
	}
	return ext;
}

/* ------------------------------------------------------- both local stores */

/*
 * memoryTake / shmTake(store, key, policy, cost, out: Float64Array
 *   [, now_us]) -> allowed (bool)
 * Decides at once, at now_us when given (a Limiter's `clock`), else at
 * the wall clock; writes the decision into out.
 */
static napi_value local_take(napi_env env, napi_callback_info info, int shared)
{
	size_t argc = 6;
	napi_value argv[6], res;
	void *s;
	int64_t now;
	policy_t *p;
	uint64_t cost;
	void *data;
	size_t outlen = 0;
	napi_typedarray_type tt;
	char key[SLUICE_KEY_MAX];
	size_t keylen;
	sluice_decision_t sum;
	int allowed;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	s = take_args(env, argv, &p, key, &keylen, &cost);
	if (!s)
		return NULL;
	CHECK(env, napi_get_typedarray_info(env, argv[4], &tt, &outlen, &data,
					    NULL, NULL));
	if (tt != napi_float64_array || outlen < DECISION_FIELDS) {
		napi_throw_type_error(env, NULL, "decision buffer");
		return NULL;
	}
	if (argc < 6 || napi_get_value_int64(env, argv[5], &now) != napi_ok)
		now = sluice_now_us();
	allowed =
		shared ? sluice_shmstore_take(s, key, keylen, p->limits,
					      p->nlimits, cost, now, NULL, &sum)
		       : sluice_memstore_take(s, key, keylen, p->limits,
					      p->nlimits, cost, now, NULL,
					      &sum);
	if (allowed < 0) {
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(allowed));
		return NULL;
	}
	decision_numbers(&sum, sum.which, data);
	CHECK(env, napi_get_boolean(env, allowed == 1, &res));
	return res;
}

static napi_value memory_take(napi_env env, napi_callback_info info)
{
	return local_take(env, info, 0);
}

static napi_value shm_take(napi_env env, napi_callback_info info)
{
	return local_take(env, info, 1);
}

/* --------------------------------------------------------- Redis store */

/*
 * One Redis client on Node's loop.  While open it holds a strong
 * reference to its JS owner (like an open socket, it is not collected
 * while it may still call back) and keeps the loop alive through its
 * connections; close() releases both, so the process may exit.
 */
typedef struct rclient_s {
	sluice_redis_t *r;
	napi_env env;
	napi_async_context actx;
	napi_ref owner;
	/* Until the client has released its handles, the environment must
	 * not go away (a worker's loop stops, the addon may be unloaded):
	 * an async cleanup hook holds it. */
	napi_async_cleanup_hook_handle hook;
	int closed;    /* close() ran: later calls are refused */
	int teardown;  /* the environment is going away: no JS */
	int released;  /* the client's memory is released */
	int finalized; /* the JS external is gone */
	/* The last failure a node reported ("node: tls_failed: reason"),
	 * "" once that node answers again: the why of a failed take. */
	char why[320];
	char why_node[128];
} rclient_t;

typedef struct rcall_s {
	rclient_t *c;
	napi_ref cb;
} rcall_t;

/* The struct lives until both the client is released and the external
 * is collected, whichever comes last. */
static void on_released(void *arg)
{
	rclient_t *c = arg;

	c->released = 1;
	if (c->hook) {
		napi_remove_async_cleanup_hook(c->hook);
		c->hook = NULL;
	}
	if (c->finalized)
		free(c);
}

static void rclient_close(rclient_t *c)
{
	if (c->closed)
		return;
	c->closed = 1;
	/* Pending calls are answered SLUICE_ESTORE from inside this, through
	 * the async context: release that only afterwards. */
	sluice_redis_free_then(c->r, on_released, c);
	c->r = NULL;
	if (!c->teardown) {
		napi_async_destroy(c->env, c->actx);
		napi_delete_reference(c->env, c->owner);
	}
}

/* The environment is going away with the client open (a worker ends, the
 * process exits): close it; on_released() then lets teardown go on. */
static void on_env_teardown(napi_async_cleanup_hook_handle handle, void *arg)
{
	rclient_t *c = arg;

	c->teardown = 1;
	rclient_close(c);
}

static void free_rclient(napi_env env, void *data, void *hint)
{
	rclient_t *c = data;

	c->finalized = 1;
	if (c->released)
		free(c);
}

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

/*
 * The client's node events (on the loop's thread, from inside the client,
 * never once it is closing): a failure is kept until the same node
 * answers again, so a take that fails can say why -- a certificate that
 * does not verify reads otherwise as a bare "store error".  The client
 * reports changes only, so this runs once per change, not per call.
 */
static void on_event(void *arg, const sluice_redis_event_t *ev)
{
	rclient_t *c = arg;

	switch (ev->kind) {
	case SLUICE_REDIS_EV_TLS_FAILED:
	case SLUICE_REDIS_EV_AUTH_FAILED:
	case SLUICE_REDIS_EV_UNREACHABLE:
	case SLUICE_REDIS_EV_TIMEOUT:
	case SLUICE_REDIS_EV_NO_MASTER:
		snprintf(c->why, sizeof(c->why), "%.100s: %s%s%.180s", ev->node,
			 sluice_redis_event_name(ev->kind),
			 ev->detail[0] ? ": " : "", ev->detail);
		snprintf(c->why_node, sizeof(c->why_node), "%s", ev->node);
		break;
	case SLUICE_REDIS_EV_CONNECTED:
		if (strcmp(c->why_node, ev->node) == 0)
			c->why[0] = '\0';
		break;
	case SLUICE_REDIS_EV_MASTER_CHANGED:
		/* Sentinel: the one data node moved; what failed before
		 * was about the old master, or about having none. */
		c->why[0] = '\0';
		break;
	default:
		break;
	}
}

/*
 * The strings redisNew() copies out of its options object.  They live
 * only through sluice_redis_new(), which keeps its own copies of all it
 * needs later (the URL parsed, the prefix, the TLS server name, the
 * Sentinels' names and credentials; the TLS files are read into the
 * OpenSSL context there and then).
 */
typedef struct redis_strings_s {
	char *url, *prefix;
	char **seeds;
	size_t nseeds;
	char *ca_file, *cert_file, *key_file, *server_name;
	char *master, *user, *password;
	char **addrs;
	size_t naddrs;
} redis_strings_t;

static void redis_strings_free(redis_strings_t *st)
{
	free(st->url);
	free(st->prefix);
	free_strings(st->seeds, st->nseeds);
	free(st->ca_file);
	free(st->cert_file);
	free(st->key_file);
	free(st->server_name);
	free(st->master);
	free(st->user);
	free(st->password);
	free_strings(st->addrs, st->naddrs);
}

/* redisNew()'s options into the library's: o->tls and o->sentinel point
 * at tls and sen when the options hold them.  -1 on a Node-API failure
 * (what was copied is in st, for redis_strings_free()). */
static int redis_opts(napi_env env, napi_value v, sluice_redis_opts_t *o,
		      sluice_redis_tls_t *tls, sluice_redis_sentinel_t *sen,
		      redis_strings_t *st)
{
	napi_value t;
	int has;

	if (get_string_prop(env, v, "url", &st->url) < 0 ||
	    get_string_prop(env, v, "keyPrefix", &st->prefix) < 0 ||
	    get_strings_prop(env, v, "seeds", &st->seeds, &st->nseeds) < 0)
		return -1;
	o->url = st->url;
	o->seeds = (const char *const *)st->seeds;
	o->nseeds = st->nseeds;
	o->key_prefix = st->prefix;
	o->timeout_ms = get_uint_prop(env, v, "timeoutMs");
	o->connections = get_uint_prop(env, v, "connections");
	o->flags = get_uint_prop(env, v, "scriptOnly")
			   ? SLUICE_REDIS_SCRIPT_ONLY
			   : 0;

	/* tls: { caFile, certFile, keyFile, serverName, noVerify }; its
	 * presence turns TLS on. */
	if ((has = get_object_prop(env, v, "tls", &t)) < 0)
		return -1;
	if (has) {
		if (get_string_prop(env, t, "caFile", &st->ca_file) < 0 ||
		    get_string_prop(env, t, "certFile", &st->cert_file) < 0 ||
		    get_string_prop(env, t, "keyFile", &st->key_file) < 0 ||
		    get_string_prop(env, t, "serverName", &st->server_name) < 0)
			return -1;
		tls->enabled = 1;
		tls->ca_file = st->ca_file;
		tls->cert_file = st->cert_file;
		tls->key_file = st->key_file;
		tls->server_name = st->server_name;
		tls->no_verify = get_uint_prop(env, t, "noVerify") != 0;
		o->tls = tls;
	}

	/* sentinel: { master, addrs[], user, password, tls } */
	if ((has = get_object_prop(env, v, "sentinel", &t)) < 0)
		return -1;
	if (has) {
		if (get_string_prop(env, t, "master", &st->master) < 0 ||
		    get_string_prop(env, t, "user", &st->user) < 0 ||
		    get_string_prop(env, t, "password", &st->password) < 0 ||
		    get_strings_prop(env, t, "addrs", &st->addrs, &st->naddrs) <
			    0)
			return -1;
		sen->master = st->master;
		sen->addrs = (const char *const *)st->addrs;
		sen->naddrs = st->naddrs;
		sen->user = st->user;
		sen->password = st->password;
		sen->tls = get_uint_prop(env, t, "tls") != 0;
		o->sentinel = sen;
	}
	return 0;
}

/*
 * redisNew(owner, {url, seeds[], keyPrefix, timeoutMs, connections,
 *                  scriptOnly, tls, sentinel}) -> external
 * Values are checked by index.js; the URL, seeds, Sentinel addresses and
 * TLS files by libsluice (an Error with its message).
 */
static napi_value redis_new(napi_env env, napi_callback_info info)
{
	size_t argc = 2;
	napi_value argv[2], ext, name;
	sluice_redis_opts_t o = {0};
	sluice_redis_tls_t tls = {0};
	sluice_redis_sentinel_t sen = {0};
	redis_strings_t st = {0};
	char err[256];
	rclient_t *c = NULL;
	uv_loop_t *loop;
	napi_value ret = NULL;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	if (redis_opts(env, argv[1], &o, &tls, &sen, &st) < 0)
		goto napi_fail;
	c = calloc(1, sizeof(*c));
	if (!c || napi_get_uv_event_loop(env, &loop) != napi_ok)
		goto napi_fail;
	c->env = env;
	o.on_event = on_event;
	o.event_arg = c;
	if (sluice_redis_new(loop, &o, &c->r, err, sizeof(err)) < 0) {
		napi_throw_error(env, "ERR_SLUICE_REDIS", err);
		goto out;
	}
	if (napi_create_string_utf8(env, "sluice:redis", NAPI_AUTO_LENGTH,
				    &name) != napi_ok ||
	    napi_async_init(env, argv[0], name, &c->actx) != napi_ok) {
		sluice_redis_free(c->r);
		goto napi_fail;
	}
	if (napi_create_reference(env, argv[0], 1, &c->owner) != napi_ok ||
	    napi_add_async_cleanup_hook(env, on_env_teardown, c, &c->hook) !=
		    napi_ok ||
	    napi_create_external(env, c, free_rclient, NULL, &ext) != napi_ok) {
		/* The struct is freed once released, like a closed one. */
		c->finalized = 1;
		rclient_close(c);
		c = NULL;
		goto napi_fail;
	}
	c = NULL;
	ret = ext;
	goto out;
napi_fail:
	throw_last(env);
out:
	free(c);
	redis_strings_free(&st);
	return ret;
}

/* Runs on Node's loop when Redis (or the client's timeout or breaker)
 * answers: calls the JS callback inside a callback scope, so that promise
 * continuations run right after it. */
static void on_redis(void *arg, int status, int allowed,
		     const sluice_decision_t *summary, size_t which)
{
	rcall_t *call = arg;
	rclient_t *c = call->c;
	napi_env env = c->env;
	napi_handle_scope scope;
	napi_value fn, argv[2 + DECISION_FIELDS], global;
	double nums[DECISION_FIELDS] = {0};
	size_t i;

	if (c->teardown) {
		free(call);
		return;
	}
	if (napi_open_handle_scope(env, &scope) != napi_ok)
		goto out;
	if (status == 0)
		decision_numbers(summary, which, nums);
	if (napi_get_reference_value(env, call->cb, &fn) == napi_ok &&
	    napi_get_global(env, &global) == napi_ok &&
	    napi_create_int32(env, status, &argv[0]) == napi_ok &&
	    napi_get_boolean(env, status == 0 && allowed, &argv[1]) ==
		    napi_ok) {
		for (i = 0; i < DECISION_FIELDS; i++)
			napi_create_double(env, nums[i], &argv[2 + i]);
		if (napi_make_callback(env, c->actx, global, fn,
				       2 + DECISION_FIELDS, argv,
				       NULL) == napi_pending_exception) {
			napi_value e;

			/* An exception thrown by the callback is the app's:
			 * report it as uncaught, as Node does for I/O. */
			if (napi_get_and_clear_last_exception(env, &e) ==
			    napi_ok)
				napi_fatal_exception(env, e);
		}
	}
	napi_close_handle_scope(env, scope);
out:
	napi_delete_reference(env, call->cb);
	free(call);
}

/*
 * redisTake(client, key, policy, cost, cb) -> undefined
 * cb(status, allowed, limit, remaining, retryAfterMs, resetMs, which) runs
 * once, possibly before this returns (an open breaker fails at once).
 * status is 0 or a negative SLUICE_E* code.
 */
static napi_value redis_take(napi_env env, napi_callback_info info)
{
	size_t argc = 5, keylen;
	napi_value argv[5];
	rclient_t *c;
	policy_t *p;
	uint64_t cost;
	char key[SLUICE_KEY_MAX];
	rcall_t *call;
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = take_args(env, argv, &p, key, &keylen, &cost);
	if (!c)
		return NULL;
	if (c->closed) {
		napi_throw_error(env, "ERR_SLUICE_CLOSED",
				 "the limiter is closed");
		return NULL;
	}
	call = malloc(sizeof(*call));
	if (!call) {
		napi_throw_error(env, "ERR_SLUICE_NOMEM", "out of memory");
		return NULL;
	}
	call->c = c;
	if (napi_create_reference(env, argv[4], 1, &call->cb) != napi_ok) {
		free(call);
		return throw_last(env);
	}
	rc = sluice_redis_take(c->r, key, keylen, p->limits, p->nlimits, cost,
			       on_redis, call);
	if (rc < 0) {
		napi_delete_reference(env, call->cb);
		free(call);
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(rc));
		return NULL;
	}
	return NULL;
}

/* redisHealthy(client) -> bool */
static napi_value redis_healthy(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], res;
	rclient_t *c;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = get_external(env, argv[0]);
	if (!c)
		return throw_last(env);
	CHECK(env,
	      napi_get_boolean(env, !c->closed && sluice_redis_healthy(c->r),
			       &res));
	return res;
}

/* redisLastError(client) -> "node: kind: reason" of the last failure a
 * node reported and still has, or "" */
static napi_value redis_last_error(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], res;
	rclient_t *c;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = get_external(env, argv[0]);
	if (!c)
		return throw_last(env);
	CHECK(env,
	      napi_create_string_utf8(env, c->why, NAPI_AUTO_LENGTH, &res));
	return res;
}

/* redisClose(client): pending calls are answered with an error first.
 * index.js calls it from setImmediate, never from inside a callback. */
static napi_value redis_close(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1];
	rclient_t *c;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = get_external(env, argv[0]);
	if (!c)
		return throw_last(env);
	rclient_close(c);
	return NULL;
}

/* ------------------------------------------------------------- module */

/* strerror(code) -> the library's description of a SLUICE_E* code */
static napi_value str_error(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], res;
	int32_t code = 0;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env, napi_get_value_int32(env, argv[0], &code));
	CHECK(env, napi_create_string_utf8(env, sluice_strerror(code),
					   NAPI_AUTO_LENGTH, &res));
	return res;
}

static napi_value init(napi_env env, napi_value exports)
{
	static const struct {
		const char *name;
		napi_callback fn;
	} fns[] = {
		{"policyNew", policy_new},
		{"memoryNew", memory_new},
		{"memoryTake", memory_take},
		{"shmNew", shm_new},
		{"shmTake", shm_take},
		{"redisNew", redis_new},
		{"redisTake", redis_take},
		{"redisHealthy", redis_healthy},
		{"redisClose", redis_close},
		{"redisLastError", redis_last_error},
		{"strerror", str_error},
	};
	size_t i;
	napi_value v;

	for (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		CHECK(env,
		      napi_create_function(env, fns[i].name, NAPI_AUTO_LENGTH,
					   fns[i].fn, NULL, &v));
		CHECK(env,
		      napi_set_named_property(env, exports, fns[i].name, v));
	}
	CHECK(env, napi_create_string_utf8(env, SLUICE_VERSION,
					   NAPI_AUTO_LENGTH, &v));
	CHECK(env, napi_set_named_property(env, exports, "version", v));
	CHECK(env, napi_create_int32(env, SLUICE_MAX_LIMITS, &v));
	CHECK(env, napi_set_named_property(env, exports, "MAX_LIMITS", v));
	CHECK(env, napi_create_int32(env, SLUICE_ETIMEDOUT, &v));
	CHECK(env, napi_set_named_property(env, exports, "ETIMEDOUT", v));
	return exports;
}

NAPI_MODULE(sluice, init)
