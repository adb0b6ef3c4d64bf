/*
 * addon.c -- libsluice for Node.js (Node-API): glue only.  This file:
 * helpers, policies, keys and the module's exports; the stores are in
 * local.c (memory, shared memory) and redis.c (see addon.h), both opened
 * and called through the store interface `sluice serve` uses
 * (src/store/store.h).
 *
 * The decisions are libsluice's: policies parsed by sluice_limit_parse(),
 * keys built by sluice_key_make() (so a Node app and `sluice serve` reach
 * the same buckets), takes decided by the memory store, the host's
 * shared-memory store or libsluice's own Redis client, each behind its
 * store driver.  The Redis client runs
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
#include "addon.h"
#include "util/addr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys up to this many bytes are copied on the stack. */
#define KEY_STACK_MAX 1024

/* ------------------------------------------------------------- helpers */

napi_value addon_throw_last(napi_env env)
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

void *addon_external(napi_env env, napi_value v)
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

void addon_decision(const sluice_decision_t *d, size_t which,
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

void addon_reservation(const sluice_reservation_t *r,
		       double out[DECISION_FIELDS])
{
	const sluice_decision_t *d = &r->summary;

	out[0] = r->wait_us == UINT64_MAX ? -1 : (double)r->wait_us;
	out[1] = (double)r->now_us;
	out[2] = (double)d->remaining;
	if (r->reserved)
		out[3] = ms_ceil(d->reset_after_us);
	else
		out[3] = d->retry_after_us == UINT64_MAX
				 ? -1
				 : ms_ceil(d->retry_after_us);
	out[4] = (double)d->limit;
}

/* ------------------------------------------------------------- policies */

static void free_ptr(napi_env env, void *data, void *hint)
{
	free(data);
}

/* quotas[i] ([unit, align, zone] strings, checked by index.js) into a
 * quota of `quota` requests: 0, or SLUICE_E* with the core's message. */
static int quota_limit(napi_env env, napi_value spec, double quota,
		       sluice_limit_t *l, double *window, char *err,
		       size_t errlen)
{
	napi_value v;
	char per_text[32], align[16], tz[256];
	size_t n;
	uint8_t per = 0;
	uint16_t zone = 0;
	int rc;

	if (napi_get_element(env, spec, 0, &v) != napi_ok ||
	    napi_get_value_string_utf8(env, v, per_text, sizeof(per_text),
				       &n) != napi_ok ||
	    napi_get_element(env, spec, 1, &v) != napi_ok ||
	    napi_get_value_string_utf8(env, v, align, sizeof(align), NULL) !=
		    napi_ok ||
	    napi_get_element(env, spec, 2, &v) != napi_ok ||
	    napi_get_value_string_utf8(env, v, tz, sizeof(tz), NULL) != napi_ok)
		return -1000;
	if (n + 1 >= sizeof(per_text)) {
		snprintf(err, errlen, "per is too long");
		return SLUICE_EINVAL;
	}
	rc = sluice_per_parse(per_text, &per, err, errlen);
	if (rc == 0 && tz[0])
		rc = sluice_zone_load(tz, &zone, err, errlen);
	if (rc == 0)
		rc = sluice_quota_init(l, (uint64_t)quota, per,
				       strcmp(align, "first_use") == 0
					       ? SLUICE_ALIGN_FIRST_USE
					       : SLUICE_ALIGN_CALENDAR,
				       zone, err, errlen);
	if (rc == 0)
		*window = 0; /* per decision: quotaWindow() */
	return rc;
}

/* rates[i] (a string in the core's syntax) into a token bucket of
 * capacity cap, *window its RateLimit-Policy window: 0, SLUICE_E* with
 * the core's message, or -1000 when N-API fails. */
static int rate_limit(napi_env env, napi_value rates, uint32_t i, double cap,
		      sluice_limit_t *l, double *window, char *err,
		      size_t errlen)
{
	napi_value rv;
	char rate[128];
	size_t ratelen = 0;
	sluice_rate_t r;
	uint64_t us;
	int rc;

	if (napi_get_element(env, rates, i, &rv) != napi_ok ||
	    napi_get_value_string_utf8(env, rv, rate, sizeof(rate), &ratelen) !=
		    napi_ok)
		return -1000;
	/* A cut rate could read as another one: refuse it whole. */
	if (ratelen + 4 >= sizeof(rate)) {
		snprintf(err, errlen, "rate is too long");
		return SLUICE_EINVAL;
	}
	rc = sluice_rate_parse(rate, &r, err, errlen);
	if (rc == 0)
		rc = sluice_limit_init(l, (uint64_t)cap, &r, err, errlen);
	if (rc != 0)
		return rc;
	/* The window of RateLimit-Policy: time from empty to full, in whole
	 * seconds rounded up (as sluice serve says it). */
	us = l->tau / l->rate.per + (l->tau % l->rate.per != 0);
	*window = (double)(us / 1000000 + (us % 1000000 != 0));
	return 0;
}

/* Limit i of policyNew()'s arguments (argv[1..3]) into l, a quota or a
 * token bucket, *window its RateLimit-Policy window: as rate_limit(). */
static int limit_at(napi_env env, napi_value *argv, uint32_t i,
		    sluice_limit_t *l, double *window, char *err, size_t errlen)
{
	napi_value cv, qv;
	napi_valuetype qt;
	double cap;

	if (napi_get_element(env, argv[1], i, &cv) != napi_ok ||
	    napi_get_value_double(env, cv, &cap) != napi_ok ||
	    napi_get_element(env, argv[3], i, &qv) != napi_ok ||
	    napi_typeof(env, qv, &qt) != napi_ok)
		return -1000;
	if (qt == napi_object)
		return quota_limit(env, qv, cap, l, window, err, errlen);
	return rate_limit(env, argv[2], i, cap, l, window, err, errlen);
}

/*
 * policyNew(name, capacities[], rates[], quotas[]) -> [external,
 * windows_s[]]
 * Capacities (or quotas) are whole numbers already checked by index.js;
 * rates are strings in the core's syntax; quotas[i] is null for a token
 * bucket, else [unit, align, zone] of a calendar quota of capacities[i]
 * requests.  Errors are RangeErrors with the core's own message.
 */
static napi_value policy_new(napi_env env, napi_callback_info info)
{
	size_t argc = 4;
	napi_value argv[4], ext, windows, result, w;
	uint32_t n = 0, n2 = 0, n3 = 0, i;
	policy_t *p;
	char err[256], msg[320];

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env, napi_get_array_length(env, argv[1], &n));
	CHECK(env, napi_get_array_length(env, argv[2], &n2));
	CHECK(env, napi_get_array_length(env, argv[3], &n3));
	if (n == 0 || n != n2 || n != n3 || n > SLUICE_MAX_LIMITS) {
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
		double window = 0;
		int rc = limit_at(env, argv, i, &p->limits[i], &window, err,
				  sizeof(err));

		if (rc == -1000)
			goto napi_fail;
		if (rc < 0) {
			snprintf(msg, sizeof(msg), "limit %u: %s", i, err);
			free(p);
			napi_throw_range_error(env, "ERR_SLUICE_POLICY", msg);
			return NULL;
		}
		if (napi_create_double(env, window, &w) != napi_ok ||
		    napi_set_element(env, windows, i, w) != napi_ok)
			goto napi_fail;
	}
	p->nlimits = n;
	addon_policy_learn(p, sluice_now_us());
	if (napi_create_external(env, p, free_ptr, NULL, &ext) != napi_ok)
		goto napi_fail;
	CHECK(env, napi_create_array_with_length(env, 2, &result));
	CHECK(env, napi_set_element(env, result, 0, ext));
	CHECK(env, napi_set_element(env, result, 1, windows));
	return result;
napi_fail:
	free(p);
	return addon_throw_last(env);
}

/*
 * quotaWindow(policy, i, resetMs, nowUs) -> seconds
 * RateLimit-Policy's w= of the policy's quota i, as sluice serve says it
 * (sluice_quota_window_s(), src/policy/ratelimit_headers.c): the length
 * of the window a count resetMs from nowUs belongs to, else (resetMs 0)
 * of the window a take at nowUs would open.  0 for a token bucket.
 */
static napi_value quota_window(napi_env env, napi_callback_info info)
{
	size_t argc = 4;
	napi_value argv[4], res;
	policy_t *p;
	uint32_t i = 0;
	double reset_ms = 0, now_us = 0, s = 0;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	p = addon_external(env, argv[0]);
	if (!p)
		return addon_throw_last(env);
	CHECK(env, napi_get_value_uint32(env, argv[1], &i));
	CHECK(env, napi_get_value_double(env, argv[2], &reset_ms));
	CHECK(env, napi_get_value_double(env, argv[3], &now_us));
	if (i < p->nlimits && sluice_limit_is_quota(&p->limits[i])) {
		const sluice_limit_t *l = &p->limits[i];
		int64_t now = (int64_t)now_us, t = now, start = 0, end;

		if (reset_ms > 0 && reset_ms < 1e15)
			t = now + (int64_t)reset_ms * 1000;
		if (t == now) {
			end = sluice_quota_window(l, 0, now, &start);
		} else if (l->window.align == SLUICE_ALIGN_FIRST_USE) {
			/* The window ends at a whole second: the nearest. */
			int64_t e = (t + 500000) / 1000000 * 1000000;

			end = sluice_quota_window(l, sluice_quota_state(e, 1),
						  e - 1, &start);
		} else {
			/* The decision's window ends about t (the store's
			 * clock decided: Redis's may be off ours): the
			 * calendar boundary nearest to t is its end. */
			end = sluice_quota_calendar(l, t, &start);
			if (t - start < end - t) {
				end = start;
				sluice_quota_calendar(l, start - 1, &start);
			}
		}
		if (end > start)
			s = (double)((end - start) / 1000000 +
				     ((end - start) % 1000000 != 0));
	}
	CHECK(env, napi_create_double(env, s, &res));
	return res;
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
void *addon_take_args(napi_env env, napi_value *argv, policy_t **p,
		      char key[SLUICE_KEY_MAX], size_t *keylen, uint64_t *cost)
{
	void *store = addon_external(env, argv[0]);
	double c;

	*p = addon_external(env, argv[2]);
	if (!store || !*p ||
	    napi_get_value_double(env, argv[3], &c) != napi_ok ||
	    make_key(env, argv[1], *p, key, keylen) < 0) {
		addon_throw_last(env);
		return NULL;
	}
	*cost = (uint64_t)c;
	return store;
}

int addon_admin(sluice_backend_t *be, sluice_take_item_t *it, int32_t op,
		int64_t now_us, sluice_store_cb cb, void *arg)
{
	const sluice_store_ops_t *ops = be->ops;

	switch (op) {
	case ADMIN_RESET:
		return ops->reset(be->impl, it, 1, cb, arg);
	case ADMIN_REFUND:
		return ops->refund(be->impl, it, 1, now_us, cb, arg);
	case ADMIN_PENALIZE:
		return ops->penalize(be->impl, it, 1, now_us, cb, arg);
	case ADMIN_BLOCK:
		/* n is the block's length in ms. */
		return ops->block(be->impl, it, 1, it->cost, now_us, cb, arg);
	case ADMIN_SET:
		/* n is the tokens to leave. */
		return ops->set(be->impl, it, 1, it->cost, now_us, cb, arg);
	}
	return SLUICE_EINVAL;
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

/*
 * ipKey(address, prefix) -> the bucket key of a client address, or null
 * when the text is no address: sluice serve's own parser and formatter
 * (src/util/addr.h), so a client is the same key in a Node app as in
 * serve's X-Forwarded-For, whatever its spelling (ports, brackets, zones,
 * IPv4-mapped IPv6, the /prefix grouping of IPv6).
 */
static napi_value ip_key(napi_env env, napi_callback_info info)
{
	size_t argc = 2, n = 0, len;
	napi_value argv[2], res;
	/* Longer than any address the parser takes: a longer text is
	 * refused whole, never cut to one that parses. */
	char text[128], key[SLUICE_ADDR_KEY_MAX];
	uint32_t prefix = 0;
	sluice_addr_t ad;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env,
	      napi_get_value_string_utf8(env, argv[0], text, sizeof(text), &n));
	CHECK(env, napi_get_value_uint32(env, argv[1], &prefix));
	if (n + 1 >= sizeof(text) || memchr(text, '\0', n) ||
	    sluice_addr_parse(text, n, &ad) < 0 ||
	    (len = sluice_addr_key(&ad, prefix, key, sizeof(key))) == 0) {
		CHECK(env, napi_get_null(env, &res));
		return res;
	}
	CHECK(env, napi_create_string_utf8(env, key, len, &res));
	return res;
}

static napi_value init(napi_env env, napi_value exports)
{
	static const addon_fn_t fns[] = {
		{"policyNew", policy_new},
		{"quotaWindow", quota_window},
		{"strerror", str_error},
		{"ipKey", ip_key},
	};
	const struct {
		const addon_fn_t *fns;
		size_t n;
	} tables[] = {
		{fns, sizeof(fns) / sizeof(fns[0])},
		{addon_local_fns, addon_local_nfns},
		{addon_redis_fns, addon_redis_nfns},
		{addon_wait_fns, addon_wait_nfns},
	};
	size_t t, i;
	napi_value v;

	for (t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
		for (i = 0; i < tables[t].n; i++) {
			const addon_fn_t *f = &tables[t].fns[i];

			CHECK(env, napi_create_function(env, f->name,
							NAPI_AUTO_LENGTH, f->fn,
							NULL, &v));
			CHECK(env, napi_set_named_property(env, exports,
							   f->name, v));
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
