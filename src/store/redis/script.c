/*
 * script.c -- the Lua script path: one EVALSHA per decision, the scripts
 * loaded once per connection (SCRIPT LOAD is the first command of every
 * handshake, so decisions can be pipelined right behind it).  A NOSCRIPT
 * reply (Redis restarted, failed over, or SCRIPT FLUSH) is recovered on the
 * spot: SCRIPT LOAD, then the same call again on the same connection,
 * which Redis answers in order.  The caller never sees it.
 *
 * Two scripts: script.lua for one limit (the common case: straight-line
 * code, no tables) and script_multi.lua for several.  Both answer only the
 * shortfall of each bucket at the server's time; the decision is derived
 * here, by the core itself, which is cheaper for Redis than building the
 * reply in Lua and exact by construction.
 */
#include "store/redis/redis_int.h"

#include "script_lua.h" /* generated from the .lua files by CMake */

#include <stdlib.h>
#include <string.h>

const char sluice_redis__script[] = SLUICE_SCRIPT_LUA;
const char sluice_redis__script_multi[] = SLUICE_SCRIPT_MULTI_LUA;
const char sluice_redis__script_refund[] = SLUICE_REFUND_LUA;
const char sluice_redis__script_sha[41] = SLUICE_SCRIPT_SHA1;
const char sluice_redis__script_multi_sha[41] = SLUICE_SCRIPT_MULTI_SHA1;
const char sluice_redis__script_refund_sha[41] = SLUICE_REFUND_SHA1;
const char sluice_redis__script_adjust[] = SLUICE_ADJUST_LUA;
const char sluice_redis__script_adjust_sha[41] = SLUICE_ADJUST_SHA1;
const char sluice_redis__script_carry[] = SLUICE_CARRY_LUA;
const char sluice_redis__script_carry_sha[41] = SLUICE_CARRY_SHA1;
const char sluice_redis__script_reserve[] = SLUICE_RESERVE_LUA;
const char sluice_redis__script_reserve_sha[41] = SLUICE_RESERVE_SHA1;
const char sluice_redis__script_set[] = SLUICE_SET_LUA;
const char sluice_redis__script_set_sha[41] = SLUICE_SET_SHA1;
const char sluice_redis__script_refund_if[] = SLUICE_REFUND_IF_LUA;
const char sluice_redis__script_refund_if_sha[41] = SLUICE_REFUND_IF_SHA1;
const char sluice_redis__script_import[] = SLUICE_IMPORT_LUA;
const char sluice_redis__script_import_sha[41] = SLUICE_IMPORT_SHA1;
/* Calls whose limits include a calendar quota (quota.c sends them). */
const char sluice_redis__script_quota[] = SLUICE_QUOTA_LUA;
const char sluice_redis__script_quota_sha[41] = SLUICE_QUOTA_SHA1;

/* The largest shortfall a script answers: decide.c saturates there. */
#define SHORTFALL_MAX (SLUICE_UNITS_MAX * 2)

/* Every script, always: whatever lost one (SCRIPT FLUSH, a restart, a
 * failover to a fresh master) lost the others too.  fn NULL: the replies
 * are ignored (errors surface on the EVALSHA that follows, as NOSCRIPT). */
void sluice_redis__load_script(sluice_redis_conn_t *k,
			       sluice_redis_reply_fn *fn)
{
	static const char *const scripts[] = {
		sluice_redis__script,	     sluice_redis__script_multi,
		sluice_redis__script_refund, sluice_redis__script_adjust,
		sluice_redis__script_carry,  sluice_redis__script_reserve,
		sluice_redis__script_set,    sluice_redis__script_import,
		sluice_redis__script_quota,  sluice_redis__script_refund_if};
	size_t i;

	for (i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++)
		sluice_redis__command(k->link, fn, NULL, "SCRIPT LOAD %b",
				      scripts[i], strlen(scripts[i]));
}

/* cost * interval, or tau + 1 (more than a full bucket) when cost exceeds
 * the capacity: every argument stays below 2^53, exact in Lua. */
static uint64_t need(const sluice_limit_t *l, uint64_t cost)
{
	return cost > l->capacity ? l->tau + 1 : cost * l->rate.interval;
}

/*
 * A carry (carry.lua): EVALSHA sha_carry n key_now key_earlier...
 * interval tau per (interval per)...: limits[0] is the limit now, the
 * others the earlier ones (sluice_redis_carry()).
 */
static void carry_command(const sluice_redis_t *r, const sluice_redis_call_t *c,
			  sluice_redis_resp_t *o)
{
	size_t n = c->nlimits, i;

	sluice_redis__resp_array(o, 3 + n + 1 + n * 2);
	sluice_redis__resp_arg(o, "EVALSHA", 7);
	sluice_redis__resp_arg(o, r->sha_carry, 40);
	sluice_redis__resp_u64(o, n);
	for (i = 0; i < n; i++)
		sluice_redis__resp_arg(o, c->mk[i].name, c->mk[i].len);
	sluice_redis__resp_u64(o, c->limits[0].rate.interval);
	sluice_redis__resp_u64(o, c->limits[0].tau);
	sluice_redis__resp_u64(o, c->limits[0].rate.per);
	for (i = 1; i < n; i++) {
		sluice_redis__resp_u64(o, c->limits[i].rate.interval);
		sluice_redis__resp_u64(o, c->limits[i].rate.per);
	}
}

/*
 * A penalty or a block (adjust.lua): EVALSHA sha_adjust n key...
 * (add floor max per)..., with the core's bounds (sluice_penalize() and
 * sluice_block() compute the same shortfall from the same numbers).
 */
static void adjust_command(const sluice_redis_t *r,
			   const sluice_redis_call_t *c, sluice_redis_resp_t *o)
{
	size_t n = c->nlimits, i;

	sluice_redis__resp_array(o, 3 + n + n * 4);
	sluice_redis__resp_arg(o, "EVALSHA", 7);
	sluice_redis__resp_arg(o, r->sha_adjust, 40);
	sluice_redis__resp_u64(o, n);
	for (i = 0; i < n; i++)
		sluice_redis__resp_arg(o, c->mk[i].name, c->mk[i].len);
	for (i = 0; i < n; i++) {
		const sluice_limit_t *l = &c->limits[i];
		const uint64_t max = sluice_debt_max_units(l);
		const uint64_t per = l->rate.per, t = l->rate.interval;
		uint64_t amount = c->mk[i].cost, add = 0, floor = 0;

		if (c->adjust == SLUICE_REDIS_ADJUST_PENALIZE)
			add = amount > max / t ? max : amount * t;
		else if (amount == 0)
			floor = 0;
		else if (amount > (max - l->tau + t) / (per * 1000))
			floor = max;
		else
			floor = amount * 1000 * per + l->tau - t;
		sluice_redis__resp_u64(o, add);
		sluice_redis__resp_u64(o, floor);
		sluice_redis__resp_u64(o, max);
		sluice_redis__resp_u64(o, per);
	}
}

/* EVALSHA reserve 1+n key... max_wait (need tau per max)... */
static void reserve_command(const sluice_redis_call_t *c,
			    sluice_redis_resp_t *o)
{
	size_t n = c->nlimits, i;

	sluice_redis__resp_array(o, 4 + n + 4 * n);
	sluice_redis__resp_arg(o, "EVALSHA", 7);
	sluice_redis__resp_arg(o, sluice_redis__script_reserve_sha, 40);
	sluice_redis__resp_u64(o, n);
	sluice_redis__resp_keys(o, c);
	sluice_redis__resp_u64(o, c->max_wait_us < SLUICE_WAIT_MAX_US
					  ? c->max_wait_us
					  : SLUICE_WAIT_MAX_US);
	for (i = 0; i < n; i++) {
		const sluice_limit_t *l = &c->limits[i];

		/* As script.c's need(): tau + 1 says "more than a bucket". */
		sluice_redis__resp_u64(o, c->cost > l->capacity
						  ? l->tau + 1
						  : c->cost * l->rate.interval);
		sluice_redis__resp_u64(o, l->tau);
		sluice_redis__resp_u64(o, l->rate.per);
		sluice_redis__resp_u64(o, sluice_debt_max_units(l));
	}
}

/* EVALSHA refund_if n key... (expected back per)...: expected as the
 * decimal the state is stored as, back as sluice_refund()'s (at most a
 * bucketful). */
static void refund_if_command(const sluice_redis_call_t *c,
			      sluice_redis_resp_t *o)
{
	size_t n = c->nlimits, i;

	sluice_redis__resp_array(o, 3 + n + 3 * n);
	sluice_redis__resp_arg(o, "EVALSHA", 7);
	sluice_redis__resp_arg(o, sluice_redis__script_refund_if_sha, 40);
	sluice_redis__resp_u64(o, n);
	sluice_redis__resp_keys(o, c);
	for (i = 0; i < n; i++) {
		const sluice_limit_t *l = &c->limits[i];

		sluice_redis__resp_u64(o, (uint64_t)c->expected[i]);
		if (sluice_limit_is_quota(l)) {
			/* A count: back is the cost, per 0 says so. */
			sluice_redis__resp_u64(o, c->cost < l->capacity
							  ? c->cost
							  : l->capacity);
			sluice_redis__resp_u64(o, 0);
			continue;
		}
		sluice_redis__resp_u64(
			o, (c->cost < l->capacity ? c->cost : l->capacity) *
				   l->rate.interval);
		sluice_redis__resp_u64(o, l->rate.per);
	}
}

/* EVALSHA set n key... (D per)...: the shortfall that leaves mk[].cost
 * tokens (sluice_set_remaining() at time 0 is that shortfall). */
static void set_command(const sluice_redis_call_t *c, sluice_redis_resp_t *o)
{
	size_t n = c->nlimits, i;

	sluice_redis__resp_array(o, 3 + n + 2 * n);
	sluice_redis__resp_arg(o, "EVALSHA", 7);
	sluice_redis__resp_arg(o, sluice_redis__script_set_sha, 40);
	sluice_redis__resp_u64(o, n);
	for (i = 0; i < n; i++)
		sluice_redis__resp_arg(o, c->mk[i].name, c->mk[i].len);
	for (i = 0; i < n; i++) {
		const sluice_limit_t *l = &c->limits[i];
		uint64_t rem = c->mk[i].cost;

		sluice_redis__resp_u64(
			o, rem >= l->capacity
				   ? 0
				   : l->tau - rem * l->rate.interval);
		sluice_redis__resp_u64(o, l->rate.per);
	}
}

/* EVALSHA import 3 bucket counter mark interval tau per capacity
 * window_ms (sluice_redis_import()); for a calendar quota interval is 0
 * and tau the end of its window holding now, in seconds (the count is
 * imported into that window). */
static void import_command(const sluice_redis_call_t *c, sluice_redis_resp_t *o)
{
	const sluice_limit_t *l = &c->limits[0];
	int quota = sluice_limit_is_quota(l);
	size_t i;

	sluice_redis__resp_array(o, 3 + 3 + 5);
	sluice_redis__resp_arg(o, "EVALSHA", 7);
	sluice_redis__resp_arg(o, sluice_redis__script_import_sha, 40);
	sluice_redis__resp_u64(o, 3);
	for (i = 0; i < 3; i++)
		sluice_redis__resp_arg(o, c->mk[i].name, c->mk[i].len);
	sluice_redis__resp_u64(o, quota ? 0 : l->rate.interval);
	sluice_redis__resp_u64(
		o, quota ? (uint64_t)(sluice_quota_window(l, 0, sluice_now_us(),
							  NULL) /
				      1000000)
			 : l->tau);
	sluice_redis__resp_u64(o, l->rate.per);
	sluice_redis__resp_u64(o, l->capacity);
	sluice_redis__resp_u64(o, c->mk[0].cost);
}

/* Several keys (sluice_redis_take_many()):
 *   EVALSHA sha_multi n key... (need tau per)...  or, for a refund,
 *   EVALSHA sha_refund n key... (need per)...
 * The command may be large (a request matching hundreds of rules). */
static void many_command(const sluice_redis_t *r, const sluice_redis_call_t *c,
			 sluice_redis_resp_t *o)
{
	size_t n = c->nlimits, i;

	if (c->adjust == SLUICE_REDIS_ADJUST_CARRY) {
		carry_command(r, c, o);
		return;
	}
	if (c->adjust == SLUICE_REDIS_ADJUST_SET) {
		set_command(c, o);
		return;
	}
	if (c->adjust == SLUICE_REDIS_ADJUST_IMPORT) {
		import_command(c, o);
		return;
	}
	if (c->adjust) {
		adjust_command(r, c, o);
		return;
	}

	sluice_redis__resp_array(o, 3 + n + n * (c->refund ? 2 : 3));
	sluice_redis__resp_arg(o, "EVALSHA", 7);
	sluice_redis__resp_arg(o, c->refund ? r->sha_refund : r->sha_multi, 40);
	sluice_redis__resp_u64(o, n);
	for (i = 0; i < n; i++)
		sluice_redis__resp_arg(o, c->mk[i].name, c->mk[i].len);
	for (i = 0; i < n; i++) {
		const sluice_limit_t *l = &c->limits[i];
		uint64_t cost = c->mk[i].cost;

		if (!c->refund)
			sluice_redis__resp_u64(o, need(l, cost));
		else if (cost == UINT64_MAX)
			/* A reset: more than any shortfall, a penalty's debt
			 * included, so the script deletes the state. */
			sluice_redis__resp_u64(o, sluice_debt_max_units(l) + 1);
		else
			/* As sluice_refund(): at most a bucketful back. */
			sluice_redis__resp_u64(
				o, (cost < l->capacity ? cost : l->capacity) *
					   l->rate.interval);
		if (!c->refund)
			sluice_redis__resp_u64(o, c->limits[i].tau);
		sluice_redis__resp_u64(o, c->limits[i].rate.per);
	}
}

/* One key: EVALSHA sha 1 key need tau [per]  or
 * EVALSHA sha_multi n key... (need tau per)... */
void sluice_redis__script_command(const sluice_redis_t *r,
				  const sluice_redis_call_t *c,
				  sluice_redis_resp_t *o)
{
	size_t i, per = c->nlimits > 1 || c->limits[0].rate.per > 1;

	if (c->reserve) {
		reserve_command(c, o);
		return;
	}
	if (c->refund_if) {
		refund_if_command(c, o);
		return;
	}
	if (c->mk) {
		many_command(r, c, o);
		return;
	}
	sluice_redis__resp_array(o, 3 + c->nlimits * (3 + per));
	sluice_redis__resp_arg(o, "EVALSHA", 7);
	sluice_redis__resp_arg(o, c->nlimits == 1 ? r->sha : r->sha_multi, 40);
	sluice_redis__resp_u64(o, c->nlimits);
	sluice_redis__resp_keys(o, c);
	for (i = 0; i < c->nlimits; i++) {
		const sluice_limit_t *l = &c->limits[i];

		/* A peek sends more than a bucketful: never charged, and
		 * the shortfalls come back all the same. */
		sluice_redis__resp_u64(o,
				       need(l, c->peek ? UINT64_MAX : c->cost));
		sluice_redis__resp_u64(o, l->tau);
		if (per)
			sluice_redis__resp_u64(o, l->rate.per);
	}
}

static uint64_t ceil_ms(uint64_t us)
{
	return us / 1000 + (us % 1000 != 0);
}

/* A decision's times in whole ms, rounded up, as the module answers. */
void sluice_redis__whole_ms(sluice_decision_t *d)
{
	if (!d->never)
		d->retry_after_us = ceil_ms(d->retry_after_us) * 1000;
	d->reset_after_us = ceil_ms(d->reset_after_us) * 1000;
}

/*
 * The scripts answer the shortfall D of each bucket (an integer, or an
 * array of n for several limits).  The decision is the core's for a state
 * whose shortfall at time 0 is D: (D / per) * 1000 + D % per, which
 * decide.c decodes back to exactly D (D <= 2^53, so no overflow; the
 * scripts saturate where decide.c does, so a D just below 2^53 that
 * decide.c would saturate never arrives).
 */
int sluice_redis__parse_script_reply_each(const redisReply *reply,
					  const sluice_limit_t *limits,
					  size_t n, uint64_t cost, int *allowed,
					  sluice_decision_t *d, size_t *which,
					  sluice_decision_t *each)
{
	if (n < 1 || n > SLUICE_MAX_LIMITS)
		return -1;
	if (n == 1 ? reply->type != REDIS_REPLY_INTEGER
		   : reply->type != REDIS_REPLY_ARRAY || reply->elements != n)
		return -1;
	return sluice_redis__decide_shortfalls(
		n == 1 ? &reply : (const redisReply *const *)reply->element,
		limits, n, cost, allowed, d, which, each);
}

int sluice_redis__parse_script_reply(const redisReply *reply,
				     const sluice_limit_t *limits, size_t n,
				     uint64_t cost, int *allowed,
				     sluice_decision_t *d, size_t *which)
{
	return sluice_redis__parse_script_reply_each(reply, limits, n, cost,
						     allowed, d, which, NULL);
}

int sluice_redis__shortfall_state(const redisReply *e, const sluice_limit_t *l,
				  sluice_state_t *state)
{
	uint64_t D, per = l->rate.per;

	if (e->type != REDIS_REPLY_INTEGER || e->integer < 0 ||
	    (uint64_t)e->integer > SHORTFALL_MAX)
		return -1;
	D = (uint64_t)e->integer;
	*state = (sluice_state_t)((D / per) * 1000 + D % per);
	return 0;
}

int sluice_redis__decide_shortfalls(const redisReply *const *el,
				    const sluice_limit_t *limits, size_t n,
				    uint64_t cost, int *allowed,
				    sluice_decision_t *d, size_t *which,
				    sluice_decision_t *each)
{
	sluice_state_t states[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
	sluice_decision_t ds[SLUICE_MAX_LIMITS];
	size_t i;

	if (n < 1 || n > SLUICE_MAX_LIMITS)
		return -1;
	for (i = 0; i < n; i++)
		if (sluice_redis__shortfall_state(el[i], &limits[i],
						  &states[i]) < 0)
			return -1;
	*allowed = sluice_eval_all(limits, states, n, 0, cost, next, ds, d);
	*which = d->which;
	/* Whole ms, rounded up, as the module answers them. */
	sluice_redis__whole_ms(d);
	for (i = 0; each && i < n; i++) {
		each[i] = ds[i];
		sluice_redis__whole_ms(&each[i]);
	}
	return 0;
}
