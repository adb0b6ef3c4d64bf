/*
 * quota.c -- calendar quotas (sluice_quota.h) on the script path.  A call
 * whose limits include a quota goes as one EVALSHA of quota.lua, which
 * decides its buckets as script.lua does and its quotas by the server's
 * clock (TIME), all-or-nothing; calls of buckets alone keep their scripts.
 *
 * The server's clock decides, but Lua cannot compute a zoned calendar: the
 * client sends, for each calendar quota, the windows around its own clock
 * (the previous, current and next window, from the core's
 * sluice_quota_calendar()), and the script picks the one holding the
 * server's time.  A UTC calendar of seconds to weeks (and any zone's
 * seconds) is a fixed period,
 * which the script computes itself, so a client clock off by any amount
 * does not matter there; first-use windows (one unit from the first
 * request) are computed in the script too.  When the server's time lies
 * outside the windows sent (the client's clock is off by more than a
 * window), the call is refused, writing nothing, with a retry of 1 s:
 * never allowed on a guess.
 *
 * The reply holds the server's time and each limit's state before the
 * call (a bucket's shortfall, a quota's window end and count); the
 * decision is the core's, sluice_eval_all() at the server's time, as
 * everywhere else.
 */
#include "store/redis/redis_int.h"

#include <string.h>

int64_t sluice_redis__quota_skew_us;

/* quota.lua's ops (ARGV[1]). */
enum {
	OP_TAKE,
	OP_REFUND,
	OP_PENALIZE,
	OP_BLOCK,
	OP_SET,
	OP_CARRY,
	OP_RESERVE
};

/* quota.lua's kinds of limit. */
enum { KIND_BUCKET, KIND_BOUNDS, KIND_FIRST_USE, KIND_PERIOD };

/* The largest shortfall a script answers: decide.c saturates there. */
#define SHORTFALL_MAX (SLUICE_UNITS_MAX * 2)

int sluice_redis__has_quota(const sluice_limit_t *limits, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (sluice_limit_is_quota(&limits[i]))
			return 1;
	return 0;
}

/* The client's clock, which only places the calendar windows it sends:
 * the process's (sluice_now_us(), which a test may shift), as every
 * other reading of it. */
static int64_t client_now_us(void)
{
	return sluice_now_us() + sluice_redis__quota_skew_us;
}

static void put_i64(sluice_redis_resp_t *o, int64_t v)
{
	char num[24];

	if (v >= 0) {
		sluice_redis__resp_u64(o, (uint64_t)v);
		return;
	}
	num[0] = '-';
	sluice_redis__resp_arg(o, num,
			       1 + sluice_u64_dec(num + 1, (uint64_t)-v));
}

/* Seconds of a fixed unit: UTC's seconds to weeks, and any zone's
 * seconds (offsets and transitions fall on whole seconds, so a zone's
 * second is UTC's); else 0. */
static int64_t fixed_len(const sluice_limit_t *l)
{
	static const int64_t len[] = {0, 1, 60, 3600, 86400, 604800};

	if (l->window.per == SLUICE_PER_SECOND)
		return 1;
	if (l->window.zone != 0 || l->window.per > SLUICE_PER_WEEK)
		return 0;
	return len[l->window.per];
}

/* A quota's kind and p1 .. p6 (see quota.lua). */
static void put_quota(sluice_redis_resp_t *o, const sluice_limit_t *l,
		      int64_t amount, int64_t now_us)
{
	int64_t b[4] = {0, 0, 0, 0}, len = fixed_len(l), start, end;
	int kind = KIND_BOUNDS;
	size_t j;

	if (l->window.align == SLUICE_ALIGN_FIRST_USE) {
		kind = KIND_FIRST_USE;
		b[0] = l->window.per;
	} else if (len) {
		kind = KIND_PERIOD;
		b[0] = len;
		/* ISO weeks start on Monday; 1970-01-01 was a Thursday. */
		b[1] = l->window.per == SLUICE_PER_WEEK ? 4 * 86400 : 0;
	} else {
		/* The previous, current and next window, in seconds. */
		end = sluice_quota_calendar(l, now_us, &start);
		b[1] = start / 1000000;
		b[2] = end / 1000000;
		sluice_quota_calendar(l, start - 1, &start);
		b[0] = start / 1000000;
		b[3] = sluice_quota_calendar(l, end, NULL) / 1000000;
	}
	sluice_redis__resp_u64(o, (uint64_t)kind);
	sluice_redis__resp_u64(o, l->capacity);
	put_i64(o, amount);
	for (j = 0; j < 4; j++)
		put_i64(o, b[j]);
}

static void put_bucket(sluice_redis_resp_t *o, uint64_t p1, uint64_t p2,
		       uint64_t per, uint64_t p4)
{
	sluice_redis__resp_u64(o, KIND_BUCKET);
	sluice_redis__resp_u64(o, p1);
	sluice_redis__resp_u64(o, p2);
	sluice_redis__resp_u64(o, per);
	sluice_redis__resp_u64(o, p4);
	sluice_redis__resp_u64(o, 0);
	sluice_redis__resp_u64(o, 0);
}

static int call_op(const sluice_redis_call_t *c)
{
	if (c->reserve)
		return OP_RESERVE;
	if (c->refund)
		return OP_REFUND;
	switch (c->adjust) {
	case SLUICE_REDIS_ADJUST_PENALIZE:
		return OP_PENALIZE;
	case SLUICE_REDIS_ADJUST_BLOCK:
		return OP_BLOCK;
	case SLUICE_REDIS_ADJUST_SET:
		return OP_SET;
	case SLUICE_REDIS_ADJUST_CARRY:
		return OP_CARRY;
	default:
		return OP_TAKE;
	}
}

/* A bucket's arguments for op, as script.c sends them to the scripts of
 * buckets alone (the same numbers, so the same writes). */
static void bucket_args(sluice_redis_resp_t *o, const sluice_limit_t *l, int op,
			uint64_t amount)
{
	const uint64_t per = l->rate.per, t = l->rate.interval;
	const uint64_t max = sluice_debt_max_units(l);
	uint64_t floor = 0;

	switch (op) {
	case OP_TAKE:
		put_bucket(o, amount > l->capacity ? l->tau + 1 : amount * t,
			   l->tau, per, 0);
		break;
	case OP_CARRY:
		put_bucket(o, t, l->tau, per, 0);
		break;
	case OP_RESERVE: /* as reserve.lua's arguments */
		put_bucket(o, amount > l->capacity ? l->tau + 1 : amount * t,
			   l->tau, per, max);
		break;
	case OP_REFUND:
		put_bucket(o,
			   amount == UINT64_MAX	  ? max + 1
			   : amount < l->capacity ? amount * t
						  : l->capacity * t,
			   0, per, 0);
		break;
	case OP_PENALIZE:
		put_bucket(o, amount > max / t ? max : amount * t, 0, per, max);
		break;
	case OP_BLOCK:
		if (amount == 0)
			floor = 0;
		else if (amount > (max - l->tau + t) / (per * 1000))
			floor = max;
		else
			floor = amount * 1000 * per + l->tau - t;
		put_bucket(o, 0, floor, per, max);
		break;
	default: /* OP_SET: the shortfall that leaves `amount` tokens */
		put_bucket(o, amount >= l->capacity ? 0 : l->tau - amount * t,
			   0, per, 0);
	}
}

/* A quota's amount for op (see quota.lua). */
static int64_t quota_amount(const sluice_limit_t *l, int op, uint64_t amount)
{
	const uint64_t q = l->capacity;

	switch (op) {
	case OP_TAKE:
	case OP_RESERVE:
		return (int64_t)(amount > q ? q + 1 : amount);
	case OP_REFUND:
		return amount == UINT64_MAX
			       ? -1
			       : (int64_t)(amount < q ? amount : q);
	case OP_PENALIZE:
		return (int64_t)(amount < SLUICE_QUOTA_MAX ? amount
							   : SLUICE_QUOTA_MAX);
	case OP_BLOCK:
		return amount > 0;
	case OP_CARRY:
		return 0;
	default:
		return (int64_t)(amount < q ? amount : q);
	}
}

void sluice_redis__quota_command(const sluice_redis_call_t *c,
				 sluice_redis_resp_t *o)
{
	const int op = call_op(c);
	const int64_t now_us = client_now_us();
	size_t n = c->nlimits, i;

	sluice_redis__resp_array(o, 4 + n + 7 * n + (op == OP_RESERVE));
	sluice_redis__resp_arg(o, "EVALSHA", 7);
	sluice_redis__resp_arg(o, sluice_redis__script_quota_sha, 40);
	sluice_redis__resp_u64(o, n);
	if (c->mk)
		for (i = 0; i < n; i++)
			sluice_redis__resp_arg(o, c->mk[i].name, c->mk[i].len);
	else
		sluice_redis__resp_keys(o, c);
	sluice_redis__resp_u64(o, (uint64_t)op);
	for (i = 0; i < n; i++) {
		const sluice_limit_t *l = &c->limits[i];
		/* A peek asks for more than any limit holds: never
		 * charged, and the states come back all the same. */
		uint64_t amount = c->mk	    ? c->mk[i].cost
				  : c->peek ? UINT64_MAX
					    : c->cost;

		if (sluice_limit_is_quota(l))
			put_quota(o, l, quota_amount(l, op, amount), now_us);
		else
			bucket_args(o, l, op, amount);
	}
	if (op == OP_RESERVE)
		sluice_redis__resp_u64(o, c->max_wait_us < SLUICE_WAIT_MAX_US
						  ? c->max_wait_us
						  : SLUICE_WAIT_MAX_US);
}

/* ------------------------------------------------------------ replies */

static int reply_int(const redisReply *e, long long lo, long long hi,
		     long long *v)
{
	if (e->type != REDIS_REPLY_INTEGER || e->integer < lo ||
	    e->integer > hi)
		return -1;
	*v = e->integer;
	return 0;
}

/* A client clock far off is a misconfiguration the operator must see:
 * every call with a calendar quota is refused until it is fixed. */
static void tell_skew(const sluice_redis_call_t *c)
{
	sluice_redis_t *r = c->r;
	uint64_t now = sluice_redis__now(r);

	if (r->quota_skew_told_ms && now - r->quota_skew_told_ms < 1000)
		return;
	r->quota_skew_told_ms = now ? now : 1;
	sluice_redis__event(r, c->conn ? c->conn->node : c->guard,
			    SLUICE_REDIS_EV_REFUSED,
			    "calendar quota refused: this client's clock is "
			    "more than a window away from the server's "
			    "(Redis TIME); fix the clocks (NTP)");
}

int sluice_redis__quota_states(const sluice_redis_call_t *c,
			       const redisReply *reply,
			       const sluice_limit_t *limits, size_t n,
			       int64_t *now_us, sluice_state_t *states,
			       size_t *skew)
{
	long long now, v, end, used;
	size_t i;

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
	    reply->element[0]->type != REDIS_REPLY_INTEGER)
		return -1;
	if (reply->element[0]->integer == -1) {
		if (reply_int(reply->element[1], 1, (long long)n, &v) < 0)
			return -1;
		*skew = (size_t)v - 1;
		tell_skew(c);
		return 1;
	}
	if (reply->elements != n + 1 ||
	    reply_int(reply->element[0], 1, INT64_MAX / 1000 / 2, &now) < 0)
		return -1;
	*now_us = now;
	for (i = 0; i < n; i++) {
		const redisReply *e = reply->element[i + 1];

		if (!sluice_limit_is_quota(&limits[i])) {
			sluice_state_t s0;
			int64_t tat;

			/* The shortfall at the server's time: its state at
			 * time 0 moved to now (a debt beyond int64's years
			 * saturates). */
			if (sluice_redis__shortfall_state(e, &limits[i], &s0) <
			    0)
				return -1;
			tat = s0 / 1000;
			if (tat > INT64_MAX / 1000 - now - 1)
				s0 = (INT64_MAX / 1000 - now - 1) * 1000;
			states[i] = s0 ? s0 + now * 1000 : 0;
			continue;
		}
		if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
		    reply_int(e->element[0], 0, INT64_MAX / 1000000000 - 1,
			      &end) < 0 ||
		    reply_int(e->element[1], 0, (long long)SLUICE_QUOTA_MAX,
			      &used) < 0)
			return -1;
		/* sluice_quota_state(end_s * 10^6, used), written out:
		 * the encoding sluice_quota.h defines. */
		states[i] = used ? end * SLUICE_QUOTA_STATE_SCALE + used : 0;
	}
	return 0;
}

void sluice_redis__quota_skewed(const sluice_limit_t *l, size_t which,
				sluice_decision_t *d)
{
	memset(d, 0, sizeof(*d));
	d->allowed = 0;
	d->limit = l->capacity;
	d->remaining = 0;
	d->retry_after_us = 1000000;
	d->which = which;
}

int sluice_redis__quota_decide(const sluice_redis_call_t *c,
			       const redisReply *reply,
			       const sluice_limit_t *limits, size_t n,
			       uint64_t cost, int *allowed,
			       sluice_decision_t *d, size_t *which,
			       sluice_decision_t *each)
{
	sluice_state_t states[SLUICE_MAX_LIMITS], next[SLUICE_MAX_LIMITS];
	sluice_decision_t ds[SLUICE_MAX_LIMITS];
	int64_t now = 0;
	size_t i, skew = 0;
	int rc;

	if (n < 1 || n > SLUICE_MAX_LIMITS)
		return -1;
	rc = sluice_redis__quota_states(c, reply, limits, n, &now, states,
					&skew);
	if (rc < 0)
		return -1;
	if (rc == 1) {
		/* The client's clock is far from the server's: refused. */
		*allowed = 0;
		sluice_redis__quota_skewed(&limits[skew], skew, d);
		*which = skew;
		for (i = 0; each && i < n; i++)
			sluice_redis__quota_skewed(&limits[skew], skew,
						   &each[i]);
		return 0;
	}
	*allowed = sluice_eval_all(limits, states, n, now, cost, next, ds, d);
	*which = d->which;
	sluice_redis__whole_ms(d);
	for (i = 0; each && i < n; i++) {
		each[i] = ds[i];
		sluice_redis__whole_ms(&each[i]);
	}
	return 0;
}
