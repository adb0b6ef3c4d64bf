/*
 * local.c -- the stores that answer at once (the memory store and the
 * host's shared-memory store), through the store interface: each JS store
 * is a backend (store.h) the addon opened itself; every call decides on
 * the caller's thread, before the driver's call returns (store.h says so
 * of the local stores), and writes its decision into the Float64Array the
 * caller gave when it opened the store (no object per call, and no look-up
 * of the array's data per call).
 */
#include "addon.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------------- opening */

/* One JS store: the backend (first, so that the external is also the
 * backend addon_take_args returns) and the decision array, held by a
 * reference for as long as the store lives, so that its data (out) stays
 * where it is. */
typedef struct local_s {
	sluice_backend_t be;
	napi_ref out_ref;
	double *out;
} local_t;

static void free_local(napi_env env, void *data, void *hint)
{
	local_t *l = data;

	if (l->out_ref)
		napi_delete_reference(env, l->out_ref);
	sluice_backend_close(&l->be);
	free(l);
}

/* The data of `arr`, which must be a Float64Array of DECISION_FIELDS or
 * more, or NULL with a TypeError pending.  Looking it up also moves a
 * small array's data out of V8's heap: from then on it does not move. */
static double *decision_array(napi_env env, napi_value arr)
{
	napi_typedarray_type tt;
	size_t len = 0;
	void *data = NULL;
	bool is = false;

	if (napi_is_typedarray(env, arr, &is) != napi_ok || !is ||
	    napi_get_typedarray_info(env, arr, &tt, &len, &data, NULL, NULL) !=
		    napi_ok ||
	    tt != napi_float64_array || len < DECISION_FIELDS || !data) {
		napi_throw_type_error(env, NULL, "decision buffer");
		return NULL;
	}
	return data;
}

/* The backend of `cfg` (a store with a synchronous path: ops->take_now)
 * writing its decisions into `out` (a Float64Array), as an external, or
 * NULL with an exception pending (nomem: the message when the store cannot
 * be opened, else the store's own, as ERR_SLUICE_STORE). */
static napi_value open_backend(napi_env env, const sluice_store_config_t *cfg,
			       napi_value out, const char *nomem)
{
	double *data = decision_array(env, out);
	local_t *l;
	sluice_backend_t *be;
	napi_value ext;
	char err[512] = "";

	if (!data)
		return NULL;
	l = calloc(1, sizeof(*l));
	be = l ? &l->be : NULL;
	if (!l || sluice_backend_open(be, cfg, NULL, NULL, NULL, err,
				      sizeof(err)) < 0) {
		free(l);
		if (nomem || !l)
			napi_throw_error(env, "ERR_SLUICE_NOMEM",
					 nomem ? nomem : "out of memory");
		else
			napi_throw_error(env, "ERR_SLUICE_STORE", err);
		return NULL;
	}
	if (!be->ops->take_now) {
		/* A store that answers later is redis.c's kind. */
		free_local(env, l, NULL);
		napi_throw_error(env, "ERR_SLUICE_STORE",
				 "the store does not answer at once");
		return NULL;
	}
	l->out = data;
	if (napi_create_reference(env, out, 1, &l->out_ref) != napi_ok ||
	    napi_create_external(env, l, free_local, NULL, &ext) != napi_ok) {
		free_local(env, l, NULL);
		return addon_throw_last(env);
	}
	return ext;
}

/* memoryNew(maxKeys, out: Float64Array) -> external */
static napi_value memory_new(napi_env env, napi_callback_info info)
{
	size_t argc = 2;
	napi_value argv[2];
	double max_keys;
	sluice_store_config_t cfg = {0};

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env, napi_get_value_double(env, argv[0], &max_keys));
	cfg.kind = SLUICE_STORE_MEMORY;
	cfg.max_keys = (size_t)max_keys;
	return open_backend(env, &cfg, argv[1],
			    "out of memory for the memory store");
}

/* shmNew(path, maxKeys, group, out: Float64Array) -> external; group ""
 * is none; out as memoryNew's.  Throws
 * the store's message (which names the file) when it cannot be opened, is
 * of another layout, owned by someone not trusted, or damaged. */
static napi_value shm_new(napi_env env, napi_callback_info info)
{
	size_t argc = 4, len = 0, glen = 0;
	napi_value argv[4];
	double max_keys;
	char path[4096], group[256];
	sluice_store_config_t cfg = {0};

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
	cfg.kind = SLUICE_STORE_SHARED;
	cfg.shm_path = path;
	cfg.shm_group = group;
	cfg.max_keys = (size_t)max_keys;
	return open_backend(env, &cfg, argv[3], NULL);
}

/* ---------------------------------------------------------------- calls */

/* What a call answered: the callback runs before the driver's call
 * returns on these stores. */
typedef struct answer_s {
	int done, status, allowed;
} answer_t;

static void on_answer(void *arg, int status, int allowed)
{
	answer_t *a = arg;

	a->done = 1;
	a->status = status;
	a->allowed = allowed;
}

/* The driver's return, else the status its callback gave. */
static int answered(int rc, const answer_t *a)
{
	if (rc < 0)
		return rc;
	/* A store that answers later is never opened here (store.h). */
	assert(a->done);
	return a->done ? a->status : SLUICE_EINVAL;
}

/*
 * The arguments every call on these stores starts with, (store, key,
 * policy, n, ...), into *it (its key built in key[]), and its clock: the
 * now_us at argv[now_arg] when given (a Limiter's `clock`), else the wall
 * clock.  The backend, or NULL with an exception pending.
 */
static sluice_backend_t *local_args(napi_env env, size_t argc, napi_value *argv,
				    size_t now_arg, policy_t **p,
				    char key[SLUICE_KEY_MAX],
				    sluice_take_item_t *it, int64_t *now)
{
	sluice_backend_t *be =
		addon_take_args(env, argv, p, key, &it->keylen, &it->cost);

	if (!be)
		return NULL;
	if (argc <= now_arg ||
	    napi_get_value_int64(env, argv[now_arg], now) != napi_ok)
		*now = sluice_now_us();
	it->key = key;
	it->limits = (*p)->limits;
	it->nlimits = (*p)->nlimits;
	return be;
}

/*
 * memoryTake / shmTake(store, key, policy, cost[, now_us]) -> allowed
 * (bool)
 * Decides at once, at now_us when given (a Limiter's `clock`), else at
 * the wall clock; writes the decision into the store's decision array.
 * memoryPeek / shmPeek: the same, charging nothing (the decision a take of cost
 * would get).
 */
static napi_value local_call(napi_env env, napi_callback_info info, int peek)
{
	size_t argc = 5;
	napi_value argv[5], res;
	sluice_backend_t *be;
	int64_t now;
	policy_t *p;
	char key[SLUICE_KEY_MAX];
	sluice_take_item_t it;
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	be = local_args(env, argc, argv, 4, &p, key, &it, &now);
	if (!be)
		return NULL;
	addon_carry(be, p, key, it.keylen, now);
	/* The store's synchronous path (every store opened here has one):
	 * the answer returned, no callback. */
	rc = be->ops->take_now(be->impl, &it, now, peek);
	if (rc < 0) {
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(rc));
		return NULL;
	}
	addon_decision(&it.summary, it.summary.which, ((local_t *)be)->out);
	CHECK(env, napi_get_boolean(env, rc == 1, &res));
	return res;
}

static napi_value local_take(napi_env env, napi_callback_info info)
{
	return local_call(env, info, 0);
}

static napi_value local_peek(napi_env env, napi_callback_info info)
{
	return local_call(env, info, 1);
}

/*
 * memoryAdmin / shmAdmin(store, key, policy, n, op[, now_us]): op
 * ADMIN_RESET (n unused), ADMIN_REFUND or ADMIN_PENALIZE (n tokens),
 * ADMIN_BLOCK (n ms).  The same state as sluice serve's /v1/reset and
 * /v1/refund change.
 */
static napi_value local_admin(napi_env env, napi_callback_info info)
{
	size_t argc = 6;
	napi_value argv[6];
	sluice_backend_t *be;
	int64_t now;
	int32_t op = -1;
	policy_t *p;
	char key[SLUICE_KEY_MAX];
	sluice_take_item_t it = {0};
	answer_t a = {0};
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	be = local_args(env, argc, argv, 5, &p, key, &it, &now);
	if (!be)
		return NULL;
	CHECK(env, napi_get_value_int32(env, argv[4], &op));
	/* Usage under an earlier policy of the name moves first: the verb
	 * covers it. */
	addon_carry(be, p, key, it.keylen, now);
	rc = addon_admin(be, &it, op, now, on_answer, &a);
	if ((rc = answered(rc, &a)) < 0) {
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(rc));
		return NULL;
	}
	return NULL;
}

/* A reservation's answer, given before the driver's call returns. */
typedef struct reserved_s {
	int done, status;
	sluice_reservation_t res;
} reserved_t;

static void on_reserved(void *arg, int status, const sluice_reservation_t *r)
{
	reserved_t *a = arg;

	a->done = 1;
	a->status = status;
	if (r)
		a->res = *r;
}

/*
 * memoryReserve / shmReserve(store, key, policy, cost, max_wait_us[,
 * now_us]) -> false when refused, else the reservation's state token (a
 * string, for memoryRefundIf): a reservation (store.h's reserve), its
 * answer in the store's decision array as addon_reservation() lays it
 * out.
 */
static napi_value local_reserve(napi_env env, napi_callback_info info)
{
	size_t argc = 6;
	napi_value argv[6], res;
	sluice_backend_t *be;
	int64_t now;
	double max_wait;
	policy_t *p;
	char key[SLUICE_KEY_MAX];
	sluice_take_item_t it = {0};
	reserved_t a = {0};
	char tok[ADDON_TOKEN_MAX];
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	be = local_args(env, argc, argv, 5, &p, key, &it, &now);
	if (!be)
		return NULL;
	CHECK(env, napi_get_value_double(env, argv[4], &max_wait));
	rc = be->ops->reserve(be->impl, &it,
			      max_wait > 0 ? (uint64_t)max_wait : 0, now,
			      on_reserved, &a);
	assert(rc < 0 || a.done);
	if (rc == 0)
		rc = a.status;
	if (rc < 0) {
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(rc));
		return NULL;
	}
	addon_reservation(&a.res, ((local_t *)be)->out);
	if (!a.res.reserved) {
		CHECK(env, napi_get_boolean(env, 0, &res));
		return res;
	}
	addon_token_format(a.res.states, p->nlimits, tok);
	CHECK(env, napi_create_string_latin1(env, tok, NAPI_AUTO_LENGTH, &res));
	return res;
}

/*
 * memoryRefundIf / shmRefundIf(store, key, policy, cost, token[, now_us])
 * -> refunded (bool): the cost given back only while the key's buckets
 * hold the states of the token (store.h's refund_if).
 */
static napi_value local_refund_if(napi_env env, napi_callback_info info)
{
	size_t argc = 6;
	napi_value argv[6], res;
	sluice_backend_t *be;
	sluice_state_t want[SLUICE_MAX_LIMITS];
	int64_t now;
	policy_t *p;
	char key[SLUICE_KEY_MAX];
	sluice_take_item_t it = {0};
	answer_t a = {0};
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	be = local_args(env, argc, argv, 5, &p, key, &it, &now);
	if (!be || !addon_token_parse(env, argv[4], p->nlimits, want))
		return NULL;
	rc = be->ops->refund_if(be->impl, &it, want, now, on_answer, &a);
	if ((rc = answered(rc, &a)) < 0) {
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(rc));
		return NULL;
	}
	CHECK(env, napi_get_boolean(env, a.allowed, &res));
	return res;
}

/* Both local stores have the same calls: the backend knows which it is. */
const addon_fn_t addon_local_fns[] = {
	{"memoryNew", memory_new},
	{"memoryTake", local_take},
	{"memoryPeek", local_peek},
	{"memoryAdmin", local_admin},
	{"shmNew", shm_new},
	{"shmTake", local_take},
	{"shmPeek", local_peek},
	{"shmAdmin", local_admin},
	{"memoryReserve", local_reserve},
	{"shmReserve", local_reserve},
	{"memoryRefundIf", local_refund_if},
	{"shmRefundIf", local_refund_if},
};
const size_t addon_local_nfns =
	sizeof(addon_local_fns) / sizeof(addon_local_fns[0]);
