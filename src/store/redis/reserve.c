/*
 * reserve.c -- reservations on Redis (sluice_redis_reserve()) and their
 * conditional refund (sluice_redis_refund_if()).  A reservation is one
 * call like a take, with its own command and reply: SLUICE.RESERVE where
 * the module has it (one limit; module_path.c builds it), else
 * reserve.lua (script.c), which answers the server's time and each
 * bucket's shortfall; the answer is then the core's (sluice_reserve_all())
 * on those shortfalls, so both paths answer alike and write the same
 * state.  That state is the reservation's answer too (res->states), what
 * SLUICE.REFUNDIF or refund_if.lua compare the stored one with.
 */
#include "store/redis/redis_int.h"
#include "util/invariant.h"

#include <string.h>

/* -------------------------------------------------------------- replies */

static uint64_t ceil_ms_us(uint64_t us)
{
	return us == UINT64_MAX ? us : (us / 1000 + (us % 1000 != 0)) * 1000;
}

/* reserve.lua's {now, D_1, ..., D_n} -> the core's answer. */
static int parse_script(const sluice_redis_call_t *c, const redisReply *reply,
			sluice_redis_outcome_t *out)
{
	sluice_state_t states[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
	size_t i, n = c->nlimits;

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != n + 1 ||
	    reply->element[0]->type != REDIS_REPLY_INTEGER ||
	    reply->element[0]->integer < 0)
		return -1;
	for (i = 0; i < n; i++)
		if (sluice_redis__shortfall_state(reply->element[i + 1],
						  &c->limits[i],
						  &states[i]) < 0)
			return -1;
	out->now_us = reply->element[0]->integer;
	out->allowed = sluice_reserve_all(c->limits, states, n, 0, c->cost,
					  c->max_wait_us, next, &out->d,
					  &out->wait_us);
	/* The states were decided at time 0: the script wrote the same
	 * shortfalls from its own now, (now + nd / per) * 1000 + nd % per,
	 * which is next + now * 1000 (decide_encode()). */
	for (i = 0; i < n; i++)
		out->states[i] = out->allowed && c->cost > 0
					 ? next[i] + out->now_us * 1000
					 : 0;
	/* Whole ms, rounded up, as the module answers them. */
	out->d.retry_after_us = ceil_ms_us(out->d.retry_after_us);
	out->d.reset_after_us = ceil_ms_us(out->d.reset_after_us);
	return 0;
}

/* A reservation with quotas (quota.lua's reserve: {now, states}): the
 * answer is the core's, sluice_reserve_all() on the states at the
 * server's time, as the script decided. */
static int parse_quota(const sluice_redis_call_t *c, const redisReply *reply,
		       sluice_redis_outcome_t *out)
{
	sluice_state_t states[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
	int64_t now = 0;
	size_t skew = 0, i;
	int rc = sluice_redis__quota_states(c, reply, c->limits, c->nlimits,
					    &now, states, &skew);

	if (rc < 0)
		return -1;
	if (rc == 1) {
		/* The client's clock is far off: refused, retry in 1 s. */
		out->allowed = 0;
		sluice_redis__quota_skewed(&c->limits[skew], skew, &out->d);
		out->wait_us = out->d.retry_after_us;
		out->now_us = 0;
		return 0;
	}
	out->now_us = now;
	out->allowed = sluice_reserve_all(c->limits, states, c->nlimits, now,
					  c->cost, c->max_wait_us, next,
					  &out->d, &out->wait_us);
	/* The states quota.lua wrote: what a conditional refund expects. */
	for (i = 0; i < c->nlimits; i++)
		out->states[i] = out->allowed && c->cost > 0 ? next[i] : 0;
	out->d.retry_after_us = ceil_ms_us(out->d.retry_after_us);
	out->d.reset_after_us = ceil_ms_us(out->d.reset_after_us);
	return 0;
}

/* SLUICE.RESERVE's [reserved, limit, remaining, retry_after_ms, reset_ms,
 * wait_us, now_us, state]; a module without the state (7 elements)
 * leaves 0, which no conditional refund matches. */
static int parse_module(const redisReply *reply, sluice_redis_outcome_t *out)
{
	long long v[8] = {0};
	size_t i;

	if (reply->type != REDIS_REPLY_ARRAY ||
	    (reply->elements != 7 && reply->elements != 8))
		return -1;
	for (i = 0; i < reply->elements; i++) {
		if (reply->element[i]->type != REDIS_REPLY_INTEGER)
			return -1;
		v[i] = reply->element[i]->integer;
	}
	if (v[1] < 0 || v[2] < 0 || v[4] < 0 || v[6] < 0)
		return -1;
	memset(&out->d, 0, sizeof(out->d));
	out->allowed = v[0] != 0;
	out->d.allowed = out->allowed;
	out->d.limit = (uint64_t)v[1];
	out->d.remaining = (uint64_t)v[2];
	out->wait_us = v[5] < 0 ? UINT64_MAX : (uint64_t)v[5];
	out->d.never = v[5] < 0;
	out->d.retry_after_us = out->allowed ? ceil_ms_us(out->wait_us)
				: v[3] < 0   ? UINT64_MAX
					     : (uint64_t)v[3] * 1000;
	out->d.reset_after_us = (uint64_t)v[4] * 1000;
	out->now_us = v[6];
	out->states[0] = v[7] > 0 ? (sluice_state_t)v[7] : 0;
	return 0;
}

static int reserve_parse(sluice_redis_call_t *c, const redisReply *reply,
			 sluice_redis_outcome_t *out)
{
	int rc = !c->script ? parse_module(reply, out)
		 : sluice_redis__has_quota(c->limits, c->nlimits)
			 ? parse_quota(c, reply, out)
			 : parse_script(c, reply, out);

	if (rc < 0)
		return rc;
	SLUICE_ASSERT(out->d.which < c->nlimits);
	out->d.which = c->orig[out->d.which];
	return 0;
}

static void reserve_done(sluice_redis_call_t *c, int status,
			 const sluice_redis_outcome_t *out)
{
	sluice_reservation_t res;
	size_t i;

	if (!out) {
		c->reserve_cb(c->arg, status, NULL);
		return;
	}
	res.reserved = out->allowed;
	res.wait_us = out->wait_us;
	res.now_us = out->now_us;
	res.summary = out->d;
	/* In the caller's order, a repeated limit's its first's. */
	memset(res.states, 0, sizeof(res.states));
	for (i = 0; i < c->ncaller; i++)
		res.states[i] = out->states[c->dist[i]];
	c->reserve_cb(c->arg, status, &res);
}

static const sluice_redis_shape_t reserve_shape = {reserve_parse, reserve_done};

/* refund_if.lua and SLUICE.REFUNDIF both answer 1 (refunded) or 0. */
static int refund_if_parse(sluice_redis_call_t *c, const redisReply *reply,
			   sluice_redis_outcome_t *out)
{
	(void)c;
	if (reply->type != REDIS_REPLY_INTEGER ||
	    (reply->integer != 0 && reply->integer != 1))
		return -1;
	memset(&out->d, 0, sizeof(out->d));
	out->allowed = (int)reply->integer;
	out->d.allowed = out->allowed;
	return 0;
}

static void refund_if_done(sluice_redis_call_t *c, int status,
			   const sluice_redis_outcome_t *out)
{
	c->item_cb(c->arg, status, out ? out->allowed : 0);
}

static const sluice_redis_shape_t refund_if_shape = {refund_if_parse,
						     refund_if_done};

/* ------------------------------------------------------------------ API */

int sluice_redis_reserve(sluice_redis_t *r, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits,
			 uint64_t cost, uint64_t max_wait_us,
			 sluice_redis_reserve_cb cb, void *arg)
{
	sluice_redis_call_t *c;
	int rc;

	if (!cb || r->closing)
		return SLUICE_EINVAL;
	if ((rc = sluice_redis__check_item(r, key, keylen, limits, nlimits)))
		return rc;
	c = sluice_redis__one_call(r, &reserve_shape, key, keylen, limits,
				   nlimits, cost);
	if (!c)
		return SLUICE_ENOMEM;
	c->reserve = 1;
	c->max_wait_us = max_wait_us < SLUICE_WAIT_MAX_US ? max_wait_us
							  : SLUICE_WAIT_MAX_US;
	c->reserve_cb = cb;
	c->arg = arg;
	sluice_redis__start(c);
	return 0;
}

int sluice_redis_refund_if(sluice_redis_t *r, const void *key, size_t keylen,
			   const sluice_limit_t *limits, size_t nlimits,
			   uint64_t cost, const sluice_state_t *expected,
			   sluice_redis_many_cb cb, void *arg)
{
	sluice_redis_call_t *c;
	size_t i;
	int rc;

	if (!cb || !expected || r->closing)
		return SLUICE_EINVAL;
	if ((rc = sluice_redis__check_item(r, key, keylen, limits, nlimits)))
		return rc;
	c = sluice_redis__one_call(r, &refund_if_shape, key, keylen, limits,
				   nlimits, cost);
	if (!c)
		return SLUICE_ENOMEM;
	/* One per distinct limit (its bucket), as the call's limits. */
	for (i = 0; i < c->nlimits; i++)
		c->expected[i] = expected[c->orig[i]];
	c->refund_if = 1;
	c->item_cb = cb;
	c->arg = arg;
	sluice_redis__start(c);
	return 0;
}
