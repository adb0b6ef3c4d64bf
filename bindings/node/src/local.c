/*
 * local.c -- the memory store and the host's shared-memory store: every
 * call decides at once, on the caller's thread, and writes its decision
 * into a Float64Array the caller owns (no object per call).
 */
#include "addon.h"

#include <stdio.h>
#include <stdlib.h>

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
	sluice_memstore_open(&s, (size_t)max_keys, NULL, 0);
	if (!s) {
		napi_throw_error(env, "ERR_SLUICE_NOMEM",
				 "out of memory for the memory store");
		return NULL;
	}
	if (napi_create_external(env, s, free_memstore, NULL, &ext) !=
	    napi_ok) {
		sluice_memstore_free(s);
		return addon_throw_last(env);
	}
	return ext;
}

/* ------------------------------------------------- shared-memory store */

static void free_shmstore(napi_env env, void *data, void *hint)
{
	sluice_shmstore_close(data);
}

/* shmNew(path, maxKeys, group) -> external; group "" is none.  Throws
 * the store's message (which names the file) when it cannot be opened, is
 * of another layout, owned by someone not trusted, or damaged. */
static napi_value shm_new(napi_env env, napi_callback_info info)
{
	size_t argc = 3, len = 0, glen = 0;
	napi_value argv[3], ext;
	double max_keys;
	sluice_shmstore_t *s;
	char path[4096], group[256], err[512];
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env, napi_get_value_string_utf8(env, argv[0], path, sizeof(path),
					      &len));
	CHECK(env, napi_get_value_double(env, argv[1], &max_keys));
	CHECK(env, napi_get_value_string_utf8(env, argv[2], group,
					      sizeof(group), &glen));
	if (len >= sizeof(path) - 1) {
		napi_throw_range_error(env, "ERR_SLUICE_STORE",
				       "store.shared.path is too long");
		return NULL;
	}
	if (glen >= sizeof(group) - 1) {
		napi_throw_range_error(env, "ERR_SLUICE_STORE",
				       "store.shared.group is too long");
		return NULL;
	}
	rc = sluice_shmstore_open_group(&s, path, (size_t)max_keys, group, err,
					sizeof(err));
	if (rc != 0) {
		napi_throw_error(env, "ERR_SLUICE_STORE", err);
		return NULL;
	}
	if (napi_create_external(env, s, free_shmstore, NULL, &ext) !=
	    napi_ok) {
		sluice_shmstore_close(s);
		return addon_throw_last(env);
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
typedef int take_fn(void *store, const void *key, size_t keylen,
		    const sluice_limit_t *limits, size_t nlimits, uint64_t cost,
		    int64_t now_us, sluice_decision_t *decisions,
		    sluice_decision_t *summary);

static int mem_take(void *s, const void *key, size_t keylen,
		    const sluice_limit_t *limits, size_t n, uint64_t cost,
		    int64_t now, sluice_decision_t *ds, sluice_decision_t *sum)
{
	return sluice_memstore_take(s, key, keylen, limits, n, cost, now, ds,
				    sum);
}

static int shm_take_(void *s, const void *key, size_t keylen,
		     const sluice_limit_t *limits, size_t n, uint64_t cost,
		     int64_t now, sluice_decision_t *ds, sluice_decision_t *sum)
{
	return sluice_shmstore_take(s, key, keylen, limits, n, cost, now, ds,
				    sum);
}

static int mem_peek(void *s, const void *key, size_t keylen,
		    const sluice_limit_t *limits, size_t n, uint64_t cost,
		    int64_t now, sluice_decision_t *ds, sluice_decision_t *sum)
{
	return sluice_memstore_peek(s, key, keylen, limits, n, cost, now, ds,
				    sum);
}

static int shm_peek_(void *s, const void *key, size_t keylen,
		     const sluice_limit_t *limits, size_t n, uint64_t cost,
		     int64_t now, sluice_decision_t *ds, sluice_decision_t *sum)
{
	return sluice_shmstore_peek(s, key, keylen, limits, n, cost, now, ds,
				    sum);
}

static napi_value local_take(napi_env env, napi_callback_info info,
			     take_fn *take)
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
	s = addon_take_args(env, argv, &p, key, &keylen, &cost);
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
	allowed = take(s, key, keylen, p->limits, p->nlimits, cost, now, NULL,
		       &sum);
	if (allowed < 0) {
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(allowed));
		return NULL;
	}
	addon_decision(&sum, sum.which, data);
	CHECK(env, napi_get_boolean(env, allowed == 1, &res));
	return res;
}

static napi_value memory_take(napi_env env, napi_callback_info info)
{
	return local_take(env, info, mem_take);
}

static napi_value shm_take(napi_env env, napi_callback_info info)
{
	return local_take(env, info, shm_take_);
}

/* memoryPeek / shmPeek: as memoryTake, charging nothing (the decision a
 * take of cost would get). */
static napi_value memory_peek(napi_env env, napi_callback_info info)
{
	return local_take(env, info, mem_peek);
}

static napi_value shm_peek(napi_env env, napi_callback_info info)
{
	return local_take(env, info, shm_peek_);
}

/*
 * memoryAdmin / shmAdmin(store, key, policy, n, op[, now_us]): op
 * ADMIN_RESET (n unused), ADMIN_REFUND or ADMIN_PENALIZE (n tokens),
 * ADMIN_BLOCK (n ms).  The same state as sluice serve's /v1/reset and
 * /v1/refund change.
 */
static napi_value local_admin(napi_env env, napi_callback_info info, int shared)
{
	size_t argc = 6, keylen;
	napi_value argv[6];
	void *s;
	int64_t now;
	int32_t op = -1;
	policy_t *p;
	uint64_t n;
	char key[SLUICE_KEY_MAX];
	int rc = SLUICE_EINVAL;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	s = addon_take_args(env, argv, &p, key, &keylen, &n);
	if (!s)
		return NULL;
	CHECK(env, napi_get_value_int32(env, argv[4], &op));
	if (argc < 6 || napi_get_value_int64(env, argv[5], &now) != napi_ok)
		now = sluice_now_us();
	switch (op) {
	case ADMIN_RESET:
		rc = shared ? sluice_shmstore_reset(s, key, keylen, p->limits,
						    p->nlimits)
			    : sluice_memstore_reset(s, key, keylen, p->limits,
						    p->nlimits);
		break;
	case ADMIN_REFUND:
		rc = shared ? sluice_shmstore_refund(s, key, keylen, p->limits,
						     p->nlimits, n, now)
			    : sluice_memstore_refund(s, key, keylen, p->limits,
						     p->nlimits, n, now);
		break;
	case ADMIN_PENALIZE:
		rc = shared ? sluice_shmstore_penalize(s, key, keylen,
						       p->limits, p->nlimits, n,
						       now)
			    : sluice_memstore_penalize(s, key, keylen,
						       p->limits, p->nlimits, n,
						       now);
		break;
	case ADMIN_BLOCK:
		rc = shared ? sluice_shmstore_block(s, key, keylen, p->limits,
						    p->nlimits, n, now)
			    : sluice_memstore_block(s, key, keylen, p->limits,
						    p->nlimits, n, now);
		break;
	}
	if (rc < 0) {
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(rc));
		return NULL;
	}
	return NULL;
}

static napi_value memory_admin(napi_env env, napi_callback_info info)
{
	return local_admin(env, info, 0);
}

static napi_value shm_admin(napi_env env, napi_callback_info info)
{
	return local_admin(env, info, 1);
}

const addon_fn_t addon_local_fns[] = {
	{"memoryNew", memory_new},   {"memoryTake", memory_take},
	{"memoryPeek", memory_peek}, {"memoryAdmin", memory_admin},
	{"shmNew", shm_new},	     {"shmTake", shm_take},
	{"shmPeek", shm_peek},	     {"shmAdmin", shm_admin},
};
const size_t addon_local_nfns =
	sizeof(addon_local_fns) / sizeof(addon_local_fns[0]);
