/*
 * wait.c -- waiting for a turn on the Redis store (a reservation from
 * Node's loop), the conditional refund of a reservation on that store,
 * and the state tokens JS holds for them (local.c has the same calls of
 * the stores that answer at once).  A token names the states the
 * reservation left; a refund given it changes nothing once another call
 * moved them on (sluice_refund_if()): an aborted wait() or a delayed
 * request that should not count then keeps its charge, never opening a
 * gap a later request would take.
 */
#include "redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- tokens */

void addon_token_format(const sluice_state_t *states, size_t n,
			char out[ADDON_TOKEN_MAX])
{
	sluice_states_format(states, n, out, ADDON_TOKEN_MAX);
}

void *addon_token_parse(napi_env env, napi_value v, size_t n,
			sluice_state_t *states)
{
	char buf[ADDON_TOKEN_MAX];
	size_t len = 0;

	if (napi_get_value_string_latin1(env, v, buf, sizeof(buf), &len) !=
		    napi_ok ||
	    len + 1 >= sizeof(buf) ||
	    sluice_states_parse(buf, len, n, states) != 0) {
		napi_throw_type_error(env, "ERR_SLUICE_TOKEN",
				      "not a reservation's state token for "
				      "this policy");
		return NULL;
	}
	return states;
}

/* ------------------------------------------------------ Redis store */

/* A reservation's answer (store.h's reserve callback): its numbers as
 * addon_reservation() lays them out and its token by id, then the queue,
 * as a take's. */
static void on_reserved(void *arg, int status, const sluice_reservation_t *r)
{
	rcall_t *call = arg;
	rclient_t *c = call->c;

	call->status = status;
	call->allowed = r && r->reserved;
	if (r)
		addon_reservation(r, call->nums);
	else
		memset(call->nums, 0, sizeof(call->nums));
	if (call->allowed && call->id >= c->ntokens) {
		uint32_t n = c->ntokens ? c->ntokens : 16;
		void *grown;

		while (n <= call->id)
			n *= 2;
		grown = realloc(c->tokens, n * sizeof(c->tokens[0]));
		if (grown) {
			c->tokens = grown;
			c->ntokens = n;
		}
	}
	if (call->allowed && call->id < c->ntokens)
		addon_token_format(r->states, call->item.nlimits,
				   c->tokens[call->id]);
	else if (call->id < c->ntokens)
		c->tokens[call->id][0] = '\0'; /* none: nothing to refund */
	rclient_enqueue(c, call);
}

/*
 * redisReserve(client, key, policy, cost, max_wait_us, id) -> undefined:
 * a reservation at the server's clock, answered as row `id` from the
 * loop like a take (allowed: reserved; the numbers addon_reservation()'s;
 * its token then redisToken(client, id)).
 */
static napi_value redis_reserve(napi_env env, napi_callback_info info)
{
	size_t argc = 6, keylen;
	napi_value argv[6];
	rclient_t *c;
	policy_t *p;
	uint64_t cost;
	double max_wait;
	char key[SLUICE_KEY_MAX];
	rcall_t *call;
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_take_args(env, argv, &p, key, &keylen, &cost);
	if (!c || napi_get_value_double(env, argv[4], &max_wait) != napi_ok)
		return addon_throw_last(env);
	call = rclient_new_call(env, c, p, key, keylen, cost, argv[5], 0);
	if (!call)
		return NULL;
	rc = c->be.ops->reserve(c->be.impl, &call->item,
				max_wait > 0 ? (uint64_t)max_wait : 0, 0,
				on_reserved, call);
	return rclient_sent(env, call, rc);
}

/* redisToken(client, id) -> the state token of the reservation answered
 * as row id ("" when there is none: out of memory), read while that
 * answer is handled. */
static napi_value redis_token(napi_env env, napi_callback_info info)
{
	size_t argc = 2;
	napi_value argv[2], res;
	rclient_t *c;
	uint32_t id = 0;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_external(env, argv[0]);
	if (!c || napi_get_value_uint32(env, argv[1], &id) != napi_ok)
		return addon_throw_last(env);
	CHECK(env, napi_create_string_latin1(
			   env, id < c->ntokens ? c->tokens[id] : "",
			   NAPI_AUTO_LENGTH, &res));
	return res;
}

/*
 * redisRefundIf(client, key, policy, cost, token, id) -> undefined: the
 * cost given back only while the key's buckets hold the token's states,
 * at the server's clock; answered as row `id` (allowed: refunded).
 */
static napi_value redis_refund_if(napi_env env, napi_callback_info info)
{
	size_t argc = 6, keylen;
	napi_value argv[6];
	sluice_state_t want[SLUICE_MAX_LIMITS];
	rclient_t *c;
	policy_t *p;
	uint64_t cost;
	char key[SLUICE_KEY_MAX];
	rcall_t *call;
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_take_args(env, argv, &p, key, &keylen, &cost);
	if (!c)
		return addon_throw_last(env);
	if (!addon_token_parse(env, argv[4], p->nlimits, want))
		return NULL;
	call = rclient_new_call(env, c, p, key, keylen, cost, argv[5], 1);
	if (!call)
		return NULL;
	/* An admin call: its answer's allowed is "refunded". */
	rc = c->be.ops->refund_if(c->be.impl, &call->item, want, 0,
				  rclient_on_answer, call);
	return rclient_sent(env, call, rc);
}

const addon_fn_t addon_wait_fns[] = {
	{"redisReserve", redis_reserve},
	{"redisToken", redis_token},
	{"redisRefundIf", redis_refund_if},
};
const size_t addon_wait_nfns =
	sizeof(addon_wait_fns) / sizeof(addon_wait_fns[0]);
