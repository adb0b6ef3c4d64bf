/*
 * module_path.c -- the native path: when the server has the sluice module
 * loaded (SLUICE.TAKE and SLUICE.TAKEMULTI, see src/redis_module), each
 * decision is one module command instead of a script: same state, same
 * answers, a fraction of the server CPU.  Detected per connection during
 * the handshake with COMMAND INFO; until the answer is in, and wherever
 * the module is missing, the script path is used.  The module answers
 * the decision itself; its parser is here too.
 *
 * Where the module also has SLUICE.TAKEMANY (and SLUICE.TAKEEACH, its
 * form for one limit), the single-limit takes gathered for a connection
 * in one loop turn go as one command (call.c's batches): the server
 * reads, dispatches and answers one command for all of them.
 */
#include "store/redis/redis_int.h"
#include "util/invariant.h"

#include <stdlib.h>
#include <string.h>

/* COMMAND INFO answers an array per command named, nil for one the
 * server does not have. */
static int has_command(const redisReply *rep, size_t i)
{
	return rep->type == REDIS_REPLY_ARRAY && i < rep->elements &&
	       rep->element[i]->type == REDIS_REPLY_ARRAY;
}

static void on_info(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	sluice_redis_conn_t *k = l->data;

	(void)priv;
	if (!k || k->link != l || !rep)
		return;
	k->module = has_command(rep, 0) && has_command(rep, 1);
	k->module_reserve = k->module && has_command(rep, 4);
	k->module_refund_if = k->module && has_command(rep, 5);
	k->batch = !k->module		 ? SLUICE_REDIS_BATCH_NONE
		   : has_command(rep, 3) ? SLUICE_REDIS_BATCH_EACH
		   : has_command(rep, 2) ? SLUICE_REDIS_BATCH_MANY
					 : SLUICE_REDIS_BATCH_NONE;
}

void sluice_redis__detect_module(sluice_redis_conn_t *k)
{
	k->batch = SLUICE_REDIS_BATCH_NONE;
	sluice_redis__command(k->link, on_info, NULL,
			      "COMMAND INFO SLUICE.TAKE SLUICE.TAKEMULTI "
			      "SLUICE.TAKEMANY SLUICE.TAKEEACH SLUICE.RESERVE "
			      "SLUICE.REFUNDIF");
}

/* A limit's rate as the module reads it back: the exact rate
 * "<per>/<interval>us" (without printf), or a quota's
 * "@<unit>[:<zone>|:first_use]", its id's part from the '@'. */
static void put_rate(sluice_redis_resp_t *o, const sluice_limit_t *l)
{
	char buf[SLUICE_LIMIT_ID_MAX];
	size_t n;
	const char *at;

	if (sluice_limit_is_quota(l)) {
		n = sluice_limit_id(l, buf);
		at = memchr(buf, '@', n);
		if (at)
			sluice_redis__resp_arg(o, at, n - (size_t)(at - buf));
		else /* never: a quota's id has its '@' */
			o->failed = 1;
		return;
	}
	n = sluice_u64_dec(buf, l->rate.per);
	buf[n++] = '/';
	n += sluice_u64_dec(buf + n, l->rate.interval);
	memcpy(buf + n, "us", 2);
	sluice_redis__resp_arg(o, buf, n + 2);
}

/* A limit as "capacity" and its rate (put_rate()). */
static void put_limit(sluice_redis_resp_t *o, const sluice_limit_t *l)
{
	sluice_redis__resp_u64(o, l->capacity);
	put_rate(o, l);
}

/* 1 when every call decides the same limit at the same cost. */
static int one_limit(sluice_redis_call_t *const *calls, size_t n)
{
	size_t i;

	for (i = 1; i < n; i++)
		if (calls[i]->cost != calls[0]->cost ||
		    !sluice_limit_same(&calls[i]->limits[0],
				       &calls[0]->limits[0]))
			return 0;
	return 1;
}

int sluice_redis__module_batch_command(sluice_redis_call_t *const *calls,
				       size_t n, int batch,
				       sluice_redis_resp_t *o)
{
	size_t i;

	if (batch == SLUICE_REDIS_BATCH_EACH && one_limit(calls, n)) {
		sluice_redis__resp_array(o, 4 + n);
		sluice_redis__resp_arg(o, "SLUICE.TAKEEACH", 15);
		put_limit(o, &calls[0]->limits[0]);
		sluice_redis__resp_u64(o, calls[0]->cost);
		for (i = 0; i < n; i++)
			sluice_redis__resp_keys(o, calls[i]);
		return SLUICE_REDIS_BATCH_EACH;
	}
	sluice_redis__resp_array(o, 1 + 4 * n);
	sluice_redis__resp_arg(o, "SLUICE.TAKEMANY", 15);
	for (i = 0; i < n; i++) {
		sluice_redis__resp_keys(o, calls[i]);
		put_limit(o, &calls[i]->limits[0]);
		sluice_redis__resp_u64(o, calls[i]->cost);
	}
	return SLUICE_REDIS_BATCH_MANY;
}

/* SLUICE.RESERVE key capacity "<per>/<interval>us" max_wait_us COST n */
static void reserve_command(const sluice_redis_call_t *c,
			    sluice_redis_resp_t *o)
{
	SLUICE_ASSERT(c->nlimits == 1);
	sluice_redis__resp_array(o, 7);
	sluice_redis__resp_arg(o, "SLUICE.RESERVE", 14);
	sluice_redis__resp_keys(o, c);
	put_limit(o, &c->limits[0]);
	sluice_redis__resp_u64(o, c->max_wait_us);
	sluice_redis__resp_arg(o, "COST", 4);
	sluice_redis__resp_u64(o, c->cost);
}

/* SLUICE.REFUNDIF key capacity "<per>/<interval>us" state COST n */
static void refund_if_command(const sluice_redis_call_t *c,
			      sluice_redis_resp_t *o)
{
	SLUICE_ASSERT(c->nlimits == 1);
	sluice_redis__resp_array(o, 7);
	sluice_redis__resp_arg(o, "SLUICE.REFUNDIF", 15);
	sluice_redis__resp_keys(o, c);
	put_limit(o, &c->limits[0]);
	sluice_redis__resp_u64(o, (uint64_t)c->expected[0]);
	sluice_redis__resp_arg(o, "COST", 4);
	sluice_redis__resp_u64(o, c->cost);
}

/* SLUICE.TAKE key capacity rate COST n, or
 * SLUICE.TAKEMULTI n key... capacity rate ... COST n. */
void sluice_redis__module_command(const sluice_redis_call_t *c,
				  sluice_redis_resp_t *o)
{
	size_t i;

	if (c->reserve) {
		reserve_command(c, o);
		return;
	}
	if (c->refund_if) {
		refund_if_command(c, o);
		return;
	}
	if (c->nlimits == 1) {
		sluice_redis__resp_array(o, 6);
		sluice_redis__resp_arg(o, "SLUICE.TAKE", 11);
	} else {
		sluice_redis__resp_array(o, 4 + 3 * c->nlimits);
		sluice_redis__resp_arg(o, "SLUICE.TAKEMULTI", 16);
		sluice_redis__resp_u64(o, c->nlimits);
	}
	sluice_redis__resp_keys(o, c);
	for (i = 0; i < c->nlimits; i++)
		put_limit(o, &c->limits[i]);
	sluice_redis__resp_arg(o, "COST", 4);
	sluice_redis__resp_u64(o, c->cost);
}

/*
 * The module answers [allowed, limit, remaining, retry_after_ms (-1: never),
 * reset_ms] plus `which` for several limits.  Times are whole ms (rounded
 * up); the decision carries them as microseconds (ms * 1000).
 */
int sluice_redis__parse_reply(const redisReply *reply, size_t nlimits,
			      int *allowed, sluice_decision_t *d, size_t *which)
{
	long long v[6];
	size_t i, want = 5;

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < want)
		return -1;
	for (i = 0; i < reply->elements && i < 6; i++) {
		if (reply->element[i]->type != REDIS_REPLY_INTEGER)
			return -1;
		v[i] = reply->element[i]->integer;
	}
	*which = reply->elements >= 6 ? (size_t)v[5] : 0;
	if (*which >= nlimits || v[1] < 0 || v[2] < 0 || v[4] < 0)
		return -1;
	*allowed = v[0] != 0;
	d->allowed = *allowed;
	d->limit = (uint64_t)v[1];
	d->remaining = (uint64_t)v[2];
	d->never = v[3] < 0;
	d->retry_after_us = v[3] < 0 ? UINT64_MAX : (uint64_t)v[3] * 1000;
	d->reset_after_us = (uint64_t)v[4] * 1000;
	d->which = *which;
	return 0;
}
