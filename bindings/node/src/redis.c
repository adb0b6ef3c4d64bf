/*
 * redis.c -- the stores that answer from Node's own loop
 * (napi_get_uv_event_loop()): the Redis store, a backend (store.h) opened
 * on that loop with this Limiter's own events.  Takes, peeks and admin
 * calls go through the store interface and answer a JS callback from
 * the loop, batched; node events reach the limiter's JS side.
 */
#include "redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------- Redis store */

/* A call whose limits and key fit RCALL_POOL_TAIL bytes (four limits and
 * a key of 128 bytes do) is allocated of that size and kept for reuse;
 * a larger one is allocated and freed as it comes. */
#define RCALL_POOL_TAIL 256
#define RCALL_POOL_MAX	256

/* A call of `tail` bytes of limits and key, from the pool if it can be,
 * or NULL. */
static rcall_t *get_call(rclient_t *c, size_t tail)
{
	rcall_t *call;

	if (tail > RCALL_POOL_TAIL) {
		call = malloc(sizeof(*call) + tail);
		if (call)
			call->pooled = 0;
		return call;
	}
	if ((call = c->pool)) {
		c->pool = call->next;
		c->npool--;
		return call;
	}
	call = malloc(sizeof(*call) + RCALL_POOL_TAIL);
	if (call)
		call->pooled = 1;
	return call;
}

/* A call done with: back to the pool while the client is open and the
 * pool not full, else freed. */
void rclient_put_call(rclient_t *c, rcall_t *call)
{
	if (!call->pooled || c->closed || c->npool >= RCALL_POOL_MAX) {
		free(call);
		return;
	}
	call->next = c->pool;
	c->pool = call;
	c->npool++;
}

static void drop_pool(rclient_t *c)
{
	rcall_t *call;

	while ((call = c->pool)) {
		c->pool = call->next;
		free(call);
	}
	c->npool = 0;
}

/* An answer in the owner's table: id, status, allowed, then the
 * decision's DECISION_FIELDS numbers. */
#define ANSWER_FIELDS (3 + DECISION_FIELDS)

/* The struct lives until both the client is released and the external
 * is collected, whichever comes last. */
static void maybe_free(rclient_t *c)
{
	if (!c->released || c->handles_open)
		return;
	if (c->hook) {
		napi_remove_async_cleanup_hook(c->hook);
		c->hook = NULL;
	}
	if (c->finalized) {
		free(c->tokens);
		free(c);
	}
}

static void on_released(void *arg)
{
	rclient_t *c = arg;

	c->released = 1;
	maybe_free(c);
}

static void on_handle_closed(uv_handle_t *h)
{
	rclient_t *c = h->data;

	c->handles_open--;
	maybe_free(c);
}

static void deliver(rclient_t *c);

static void on_check(uv_check_t *h)
{
	deliver(h->data);
}

static void on_idle(uv_idle_t *h)
{
	deliver(h->data);
}

/* Frees the answers not delivered (the environment is going away: no
 * JS, and its references go with it). */
static void drop_queue(rclient_t *c)
{
	rcall_t *call;

	while ((call = c->q_head)) {
		c->q_head = call->next;
		free(call);
	}
	c->q_tail = NULL;
	drop_pool(c);
}

static void rclient_close(rclient_t *c)
{
	if (c->closed)
		return;
	c->closed = 1;
	/* Pending calls are answered SLUICE_ESTORE from inside this, and
	 * delivered here, through the async context: release that only
	 * afterwards. */
	sluice_backend_close_then(&c->be, on_released, c);
	if (!c->teardown) {
		deliver(c);
		napi_async_destroy(c->env, c->actx);
		napi_delete_reference(c->env, c->owner);
		napi_delete_reference(c->env, c->answers_ref);
		napi_delete_reference(c->env, c->answers_fn);
	}
	drop_queue(c);
	if (c->handles_open) {
		uv_close((uv_handle_t *)&c->check, on_handle_closed);
		uv_close((uv_handle_t *)&c->idle, on_handle_closed);
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
	if (c->released && !c->handles_open) {
		free(c->tokens);
		free(c);
	}
}

/*
 * The client's node events (on the loop's thread, from inside the client,
 * never once it is closing): a failure is kept until the same node
 * answers again, so a take that fails can say why -- a certificate that
 * does not verify reads otherwise as a bare "store error".  The client
 * reports changes only, so this runs once per change, not per call.
 */
static void tell_js(rclient_t *c, const sluice_redis_event_t *ev);

static void on_event(void *arg, const sluice_redis_event_t *ev)
{
	rclient_t *c = arg;

	tell_js(c, ev);

	switch (ev->kind) {
	case SLUICE_REDIS_EV_TLS_FAILED:
	case SLUICE_REDIS_EV_AUTH_FAILED:
	case SLUICE_REDIS_EV_UNREACHABLE:
	case SLUICE_REDIS_EV_TIMEOUT:
	case SLUICE_REDIS_EV_NO_MASTER:
	/* The server's words, redacted by the client as it read them. */
	case SLUICE_REDIS_EV_REFUSED:
		snprintf(c->why, sizeof(c->why), "%.100s: %s%s%.180s", ev->node,
			 sluice_redis_event_name(ev->kind),
			 ev->detail[0] ? ": " : "", ev->detail);
		snprintf(c->why_node, sizeof(c->why_node), "%s", ev->node);
		c->why_kind = (int)ev->kind;
		break;
	case SLUICE_REDIS_EV_CONNECTED:
	case SLUICE_REDIS_EV_BREAKER_CLOSED:
		/* A closing breaker is calls answered again: not a cure for
		 * a node that cannot be reached, only for refusals. */
		if (strcmp(c->why_node, ev->node) == 0 &&
		    (ev->kind == SLUICE_REDIS_EV_CONNECTED ||
		     c->why_kind == SLUICE_REDIS_EV_REFUSED)) {
			c->why[0] = '\0';
			c->why_kind = 0;
		}
		break;
	case SLUICE_REDIS_EV_MASTER_CHANGED:
		/* Sentinel: the one data node moved; what failed before
		 * was about the old master, or about having none. */
		c->why[0] = '\0';
		c->why_kind = 0;
		break;
	default:
		break;
	}
}

/*
 * The limiter's JS side hears of every node state change, as
 * owner._storeEvent(kind, node, detail).  A plain call, not a callback
 * scope: this runs inside the client (maybe inside a take), so no promise
 * job or nextTick may run here; _storeEvent only queues the app's hooks
 * for later (setImmediate).
 */
static void tell_js(rclient_t *c, const sluice_redis_event_t *ev)
{
	napi_env env = c->env;
	napi_handle_scope scope;
	napi_value owner, fn, argv[3];

	if (c->closed || c->teardown || !c->owner)
		return;
	if (napi_open_handle_scope(env, &scope) != napi_ok)
		return;
	if (napi_get_reference_value(env, c->owner, &owner) == napi_ok &&
	    owner &&
	    napi_get_named_property(env, owner, "_storeEvent", &fn) ==
		    napi_ok &&
	    napi_create_string_utf8(env, sluice_redis_event_name(ev->kind),
				    NAPI_AUTO_LENGTH, &argv[0]) == napi_ok &&
	    napi_create_string_utf8(env, ev->node ? ev->node : "",
				    NAPI_AUTO_LENGTH, &argv[1]) == napi_ok &&
	    napi_create_string_utf8(env, ev->detail ? ev->detail : "",
				    NAPI_AUTO_LENGTH, &argv[2]) == napi_ok) {
		napi_valuetype t;

		if (napi_typeof(env, fn, &t) == napi_ok && t == napi_function &&
		    napi_call_function(env, owner, fn, 3, argv, NULL) ==
			    napi_pending_exception) {
			napi_value e;

			if (napi_get_and_clear_last_exception(env, &e) ==
			    napi_ok)
				napi_fatal_exception(env, e);
		}
	}
	napi_close_handle_scope(env, scope);
}

/*
 * redisNew(owner, {url, seeds[], keyPrefix, timeoutMs, connections,
 *                  scriptOnly, unref, tls, sentinel}, answers) -> external
 * Values are checked by index.js; the URL, seeds, Sentinel addresses and
 * TLS files by libsluice (an Error with its message).  The options become
 * a store config (config.c), opened as any host opens one, with this
 * client's own events.  answers is a
 * Float64Array of ANSWER_FIELDS numbers per answer: the client writes
 * each batch of answers there and calls owner._answers(n).
 */
static napi_value redis_new(napi_env env, napi_callback_info info)
{
	size_t argc = 3;
	napi_value argv[3], ext, name, fn;
	napi_typedarray_type tt;
	size_t alen = 0;
	void *adata = NULL;
	sluice_store_config_t cfg = {0};
	char err[256];
	rclient_t *c = NULL;
	uv_loop_t *loop;
	napi_value ret = NULL;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env, napi_get_typedarray_info(env, argv[2], &tt, &alen, &adata,
					    NULL, NULL));
	if (tt != napi_float64_array || alen < ANSWER_FIELDS) {
		napi_throw_type_error(env, NULL, "answer table");
		return NULL;
	}
	if (addon_redis_config(env, argv[1], &cfg) < 0)
		goto napi_fail;
	c = calloc(1, sizeof(*c));
	if (!c || napi_get_uv_event_loop(env, &loop) != napi_ok)
		goto napi_fail;
	c->env = env;
	c->answers = adata;
	c->answers_cap = alen / ANSWER_FIELDS;
	c->events.on_event = on_event;
	c->events.arg = c;
	/* The client copies all it keeps of cfg: its strings go below. */
	if (sluice_backend_open_events(&c->be, &cfg, loop, NULL, NULL,
				       &c->events, err, sizeof(err)) < 0) {
		napi_throw_error(env, "ERR_SLUICE_REDIS", err);
		goto out;
	}
	/* Never fail (they only link the handles into the loop); started
	 * only while answers wait, so they hold the loop no longer. */
	uv_check_init(loop, &c->check);
	uv_idle_init(loop, &c->idle);
	c->check.data = c;
	c->idle.data = c;
	c->handles_open = 2;
	if (napi_create_string_utf8(env, "sluice:redis", NAPI_AUTO_LENGTH,
				    &name) != napi_ok ||
	    napi_async_init(env, argv[0], name, &c->actx) != napi_ok) {
		/* As a close: the handles go first, then the struct. */
		c->teardown = 1;
		c->finalized = 1;
		rclient_close(c);
		c = NULL;
		goto napi_fail;
	}
	if (napi_get_named_property(env, argv[0], "_answers", &fn) != napi_ok ||
	    napi_create_reference(env, argv[0], 1, &c->owner) != napi_ok ||
	    napi_create_reference(env, argv[2], 1, &c->answers_ref) !=
		    napi_ok ||
	    napi_create_reference(env, fn, 1, &c->answers_fn) != napi_ok ||
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
	addon_throw_last(env);
out:
	free(c);
	addon_config_free(&cfg);
	return ret;
}

/* An answer (from Redis, the client's timeout or breaker, or a close)
 * joins the queue; the first one of a batch starts the check handle,
 * which delivers them once the loop has read all it could this turn, and
 * the idle handle, which keeps the loop from waiting in poll when the
 * answer came outside it (a timer, a call that failed at once). */
void rclient_enqueue(rclient_t *c, rcall_t *call)
{
	if (c->teardown) {
		free(call);
		return;
	}
	call->next = NULL;
	if (c->q_tail)
		c->q_tail->next = call;
	else
		c->q_head = call;
	c->q_tail = call;
	if (!c->closed && !uv_is_active((uv_handle_t *)&c->check)) {
		uv_check_start(&c->check, on_check);
		uv_idle_start(&c->idle, on_idle);
	}
}

void rclient_on_answer(void *arg, int status, int allowed)
{
	rcall_t *call = arg;
	int decided = status == 0 && !call->admin;

	call->status = status;
	/* An admin call's allowed: a conditional refund's "refunded". */
	call->allowed = status == 0 && allowed;
	if (decided)
		addon_decision(&call->item.summary, call->item.summary.which,
			       call->nums);
	else
		memset(call->nums, 0, sizeof(call->nums));
	rclient_enqueue(call->c, call);
}

/* Calls owner._answers(n) for the n answers in the table (inside
 * deliver()'s scopes).  An exception thrown by a callback is the app's:
 * it is reported as uncaught, as Node does for I/O, and _answers() is
 * called again to go on from the answer after it (it keeps its place). */
static void call_js(rclient_t *c, napi_value owner, napi_value fn, size_t n)
{
	napi_env env = c->env;
	napi_value argv[1];
	int rounds;

	if (napi_create_uint32(env, (uint32_t)n, &argv[0]) != napi_ok)
		return;
	/* Bounded: each exception is one answer consumed. */
	for (rounds = 0; rounds <= (int)n; rounds++) {
		napi_value e;

		if (napi_call_function(env, owner, fn, 1, argv, NULL) !=
		    napi_pending_exception)
			return;
		if (napi_get_and_clear_last_exception(env, &e) == napi_ok)
			napi_fatal_exception(env, e);
	}
}

/*
 * Delivers the answers waiting, each callback called in turn inside one
 * callback scope; closing it runs the promise jobs and nextTicks they
 * queued, once.  Answers that arrive meanwhile (a callback's new call
 * failing at once) join this batch; those queued by the checkpoint wait
 * for the next turn.
 */
static void stop_handles(rclient_t *c)
{
	if (!c->closed) {
		uv_check_stop(&c->check);
		uv_idle_stop(&c->idle);
	}
}

static void deliver(rclient_t *c)
{
	napi_env env = c->env;
	napi_handle_scope hs;
	napi_callback_scope cs;
	napi_value owner, fn;
	rcall_t *call;

	if (c->flushing || c->teardown)
		return;
	stop_handles(c);
	if (!c->q_head)
		return;
	if (napi_open_handle_scope(env, &hs) != napi_ok)
		return;
	if (napi_get_reference_value(env, c->owner, &owner) != napi_ok ||
	    !owner ||
	    napi_get_reference_value(env, c->answers_fn, &fn) != napi_ok ||
	    !fn ||
	    napi_open_callback_scope(env, owner, c->actx, &cs) != napi_ok) {
		napi_close_handle_scope(env, hs);
		return;
	}
	c->flushing = 1;
	/* The table filled from the queue, then handed over whole; what
	 * joins the queue meanwhile (a callback's new call failing at once)
	 * goes in the next table-full. */
	while (c->q_head) {
		size_t n = 0;

		while ((call = c->q_head) && n < c->answers_cap) {
			double *a = c->answers + n * ANSWER_FIELDS;

			c->q_head = call->next;
			if (!c->q_head)
				c->q_tail = NULL;
			a[0] = (double)call->id;
			a[1] = (double)call->status;
			a[2] = call->allowed;
			memcpy(a + 3, call->nums, sizeof(call->nums));
			rclient_put_call(c, call);
			n++;
		}
		call_js(c, owner, fn, n);
	}
	/* What joined meanwhile was delivered here: an idle handle left
	 * running would keep the loop from ever waiting. */
	stop_handles(c);
	c->flushing = 0;
	napi_close_callback_scope(env, cs);
	napi_close_handle_scope(env, hs);
}

rcall_t *rclient_new_call(napi_env env, rclient_t *c, const policy_t *p,
			  const char *key, size_t keylen, uint64_t n,
			  napi_value id, int admin)
{
	size_t lsize = p->nlimits * sizeof(sluice_limit_t);
	rcall_t *call;

	if (c->closed) {
		napi_throw_error(env, "ERR_SLUICE_CLOSED",
				 "the limiter is closed");
		return NULL;
	}
	call = get_call(c, lsize + keylen);
	if (!call) {
		napi_throw_error(env, "ERR_SLUICE_NOMEM", "out of memory");
		return NULL;
	}
	if (napi_get_value_uint32(env, id, &call->id) != napi_ok) {
		rclient_put_call(c, call);
		addon_throw_last(env);
		return NULL;
	}
	call->c = c;
	call->admin = admin;
	memcpy(call->limits, p->limits, lsize);
	memcpy((char *)call->limits + lsize, key, keylen);
	memset(&call->item, 0, sizeof(call->item));
	call->item.key = (char *)call->limits + lsize;
	call->item.keylen = keylen;
	call->item.limits = call->limits;
	call->item.nlimits = p->nlimits;
	call->item.cost = n;
	return call;
}

napi_value rclient_sent(napi_env env, rcall_t *call, int rc)
{
	if (rc < 0) {
		rclient_put_call(call->c, call);
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(rc));
	}
	return NULL;
}

/*
 * redisTake(client, key, policy, cost, id) -> undefined
 * The answer comes once, from the loop, as the row of the owner's answer
 * table with this id: status (0 or a negative SLUICE_E* code), allowed,
 * limit, remaining, retryAfterMs, resetMs, which.  Throws (and never
 * answers) when the call cannot be made.  A take of one key is the
 * store's single-key take (store.h), batched by the client as
 * sluice_redis_take()'s are.
 */
static napi_value redis_call(napi_env env, napi_callback_info info, int peek)
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
	c = addon_take_args(env, argv, &p, key, &keylen, &cost);
	if (!c)
		return NULL;
	call = rclient_new_call(env, c, p, key, keylen, cost, argv[4], 0);
	if (!call)
		return NULL;
	/* Sent first on the same client: Redis carries, then decides. */
	addon_carry(&c->be, p, key, keylen, sluice_now_us());
	/* Redis decides on its own clock: no now_us. */
	rc = (peek ? c->be.ops->peek : c->be.ops->take)(
		c->be.impl, &call->item, 1, 0, rclient_on_answer, call);
	return rclient_sent(env, call, rc);
}

static napi_value redis_take(napi_env env, napi_callback_info info)
{
	return redis_call(env, info, 0);
}

/* redisPeek(client, key, policy, cost, id): as redisTake, charging
 * nothing (the decision a take of cost would get). */
static napi_value redis_peek(napi_env env, napi_callback_info info)
{
	return redis_call(env, info, 1);
}

/*
 * redisAdmin(client, key, policy, n, op, id) -> undefined: op as for
 * memoryAdmin (reset, refund n, penalize n, block n ms); the answer's
 * row (its status) comes once, from the loop, as a take's does.  Reset and
 * refund are the calls sluice serve's /v1/reset and /v1/refund make.
 */
static napi_value redis_admin(napi_env env, napi_callback_info info)
{
	size_t argc = 6, keylen;
	napi_value argv[6];
	rclient_t *c;
	policy_t *p;
	uint64_t n;
	int32_t op = -1;
	char key[SLUICE_KEY_MAX];
	rcall_t *a;
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_take_args(env, argv, &p, key, &keylen, &n);
	if (!c || napi_get_value_int32(env, argv[4], &op) != napi_ok)
		return addon_throw_last(env);
	a = rclient_new_call(env, c, p, key, keylen, n, argv[5], 1);
	if (!a)
		return NULL;
	addon_carry(&c->be, p, key, keylen, sluice_now_us());
	/* Redis decides on its own clock: no now_us. */
	rc = addon_admin(&c->be, &a->item, op, 0, rclient_on_answer, a);
	return rclient_sent(env, a, rc);
}

/* redisHealthy(client) -> bool */
static napi_value redis_healthy(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], res;
	rclient_t *c;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_external(env, argv[0]);
	if (!c)
		return addon_throw_last(env);
	CHECK(env,
	      napi_get_boolean(
		      env, !c->closed && sluice_backend_healthy(&c->be), &res));
	return res;
}

/* redisLastError(client) -> ["node: kind: reason", kind] of the last
 * failure a node reported and still has, or ["", ""] */
static napi_value redis_last_error(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], res, why, kind;
	rclient_t *c;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_external(env, argv[0]);
	if (!c)
		return addon_throw_last(env);
	CHECK(env,
	      napi_create_string_utf8(env, c->why, NAPI_AUTO_LENGTH, &why));
	CHECK(env,
	      napi_create_string_utf8(
		      env,
		      c->why[0] && c->why_kind
			      ? sluice_redis_event_name(
					(sluice_redis_event_kind_t)c->why_kind)
			      : "",
		      NAPI_AUTO_LENGTH, &kind));
	CHECK(env, napi_create_array_with_length(env, 2, &res));
	CHECK(env, napi_set_element(env, res, 0, why));
	CHECK(env, napi_set_element(env, res, 1, kind));
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
	c = addon_external(env, argv[0]);
	if (!c)
		return addon_throw_last(env);
	rclient_close(c);
	return NULL;
}

const addon_fn_t addon_redis_fns[] = {
	{"redisNew", redis_new},
	{"redisTake", redis_take},
	{"redisPeek", redis_peek},
	{"redisAdmin", redis_admin},
	{"redisHealthy", redis_healthy},
	{"redisClose", redis_close},
	{"redisLastError", redis_last_error},
};
const size_t addon_redis_nfns =
	sizeof(addon_redis_fns) / sizeof(addon_redis_fns[0]);
