/*
 * decide.c -- the bucket math: GCRA with an exact rational emission interval.
 *
 * A bucket of capacity C refilled every T = interval/per microseconds is
 * described by its theoretical arrival time TAT: the instant at which it will
 * be full again.  At time `now` the bucket is short of full by
 * D = max(TAT - now, 0) (measured in time), so it holds C - D/T tokens.
 * Taking `cost` tokens moves TAT to max(TAT, now) + cost*T, and is allowed
 * iff the new shortfall does not exceed the time from empty to full,
 * tau = C*T.  That is the token bucket of the ATM Forum TM 4.0, with one
 * integer of state instead of two numbers (tokens, last update).
 *
 * All arithmetic is done in "units" of 1/per microsecond, in which T is the
 * integer `interval` and tau the integer `limit->tau`.  sluice_limit_init()
 * guarantees tau <= SLUICE_UNITS_MAX (2^52), so D, D + cost*T and every
 * product below fit in 53 bits: the Redis Lua script, whose numbers are
 * doubles, repeats this file's computation exactly.  Keep the two in step
 * (src/store/redis/script.lua and script_multi.lua; a test replays
 * both).  One decision's arithmetic is in decide.h, in line for the memory
 * store's single take; sluice_eval() is that.
 */
#include "core/decide.h"
#include "sluice.h"
#include "util/invariant.h"
#include "util/num.h"

#include <limits.h>

void sluice_eval(const sluice_limit_t *limit, sluice_state_t state,
		 int64_t now_us, uint64_t cost, sluice_state_t *next,
		 sluice_decision_t *d)
{
	sluice_eval_inline(limit, state, now_us, cost, next, d);
}

int sluice_decision_merge(sluice_decision_t *a, const sluice_decision_t *b)
{
	int replace;

	if (a->allowed != b->allowed)
		replace = !b->allowed;
	else if (!b->allowed)
		replace = b->retry_after_us > a->retry_after_us;
	else
		replace = b->remaining < a->remaining;
	if (replace)
		*a = *b;
	return replace;
}

int sluice_eval_all(const sluice_limit_t *limits, const sluice_state_t *states,
		    size_t n, int64_t now_us, uint64_t cost,
		    sluice_state_t *next, sluice_decision_t *decisions,
		    sluice_decision_t *summary)
{
	int allowed = 1;
	size_t i;

	for (i = 0; i < n; i++) {
		sluice_eval(&limits[i], states[i], now_us, cost, &next[i],
			    &decisions[i]);
		decisions[i].which = i;
		allowed &= decisions[i].allowed;
	}
	if (!allowed) {
		/* All-or-nothing: report every bucket as it stands. */
		for (i = 0; i < n; i++) {
			if (decisions[i].allowed) {
				sluice_eval(&limits[i], states[i], now_us, 0,
					    &next[i], &decisions[i]);
				decisions[i].which = i;
				decisions[i].allowed = 0;
			}
			next[i] = states[i];
		}
	}
	if (summary && n > 0) {
		*summary = decisions[0];
		for (i = 1; i < n; i++)
			sluice_decision_merge(summary, &decisions[i]);
	}
	return allowed;
}

int64_t sluice_state_expiry_us(sluice_state_t state)
{
	if (state <= 0)
		return 0;
	return state / 1000 + (state % 1000 != 0);
}

sluice_state_t sluice_refund(const sluice_limit_t *limit, sluice_state_t state,
			     int64_t now_us, uint64_t cost)
{
	const uint32_t per = limit->rate.per;
	uint64_t D, back;

	if (sluice_limit_is_quota(limit))
		return sluice_quota_refund(limit, state, now_us, cost);
	if (now_us < 0)
		now_us = 0;
	else if (now_us > SLUICE_TIME_MAX_US)
		now_us = SLUICE_TIME_MAX_US;
	D = decide_shortfall(state, now_us, per);
	/* More than a bucketful back is a full bucket: cap before the
	 * product so it cannot overflow. */
	back = (cost < limit->capacity ? cost : limit->capacity) *
	       limit->rate.interval;
	if (D <= back)
		return 0; /* full: never beyond */
	return decide_encode(now_us, D - back, per);
}

/*
 * The largest shortfall penalize and block leave, in units: a debt of at
 * most 2^49 microseconds (about 17 years) keeps (now + debt) * 1000 inside
 * int64 for any clamped now (SLUICE_TIME_MAX_US), and at most 2^52 units
 * keeps it exact in the Lua script's doubles.  Never below tau (a limit's
 * time to full is at most SLUICE_REFILL_MAX_US = 2^48 microseconds).
 */
uint64_t sluice_debt_max_units(const sluice_limit_t *limit)
{
	const uint64_t per = limit->rate.per;

	return per >= 8 ? SLUICE_UNITS_MAX : (UINT64_C(1) << 49) * per;
}

sluice_state_t sluice_penalize(const sluice_limit_t *limit,
			       sluice_state_t state, int64_t now_us,
			       uint64_t cost)
{
	const uint32_t per = limit->rate.per;
	const uint64_t max = sluice_debt_max_units(limit);
	uint64_t D;

	if (sluice_limit_is_quota(limit))
		return sluice_quota_penalize(limit, state, now_us, cost);
	if (now_us < 0)
		now_us = 0;
	else if (now_us > SLUICE_TIME_MAX_US)
		now_us = SLUICE_TIME_MAX_US;
	D = decide_shortfall(state, now_us, per);
	if (cost == 0 || D >= max)
		return state;
	/* A charge with no check: the shortfall may pass tau (a debt the
	 * refill pays before the next request passes), up to max. */
	if (cost > (max - D) / limit->rate.interval)
		D = max;
	else
		D += cost * limit->rate.interval;
	SLUICE_ASSERT(D <= max);
	return decide_encode(now_us, D, per);
}

sluice_state_t sluice_block(const sluice_limit_t *limit, sluice_state_t state,
			    int64_t now_us, uint64_t ms)
{
	const uint32_t per = limit->rate.per;
	const uint64_t max = sluice_debt_max_units(limit);
	const uint64_t t = limit->rate.interval;
	uint64_t D, target;

	if (sluice_limit_is_quota(limit))
		return sluice_quota_block(limit, state, now_us, ms);
	if (now_us < 0)
		now_us = 0;
	else if (now_us > SLUICE_TIME_MAX_US)
		now_us = SLUICE_TIME_MAX_US;
	D = decide_shortfall(state, now_us, per);
	/*
	 * A take of one token passes at time x iff D(x) + t <= tau, and D
	 * falls by per units a microsecond: a shortfall of ms * 1000 * per +
	 * tau - t now lets the first one pass exactly ms from now, with the
	 * bucket refilling from there.  A longer block already in place
	 * stays.
	 */
	if (ms == 0)
		return state;
	/* max - tau + t below neither wraps nor is 0: a valid limit's tau
	 * is at most 2^48 us (sluice_debt_max_units()) and t at most tau. */
	SLUICE_ASSERT(t <= limit->tau && limit->tau <= max);
	if (ms > (max - limit->tau + t) / ((uint64_t)per * 1000))
		target = max;
	else
		target = ms * 1000 * per + limit->tau - t;
	if (target <= D)
		return state;
	SLUICE_ASSERT(target <= max);
	return decide_encode(now_us, target, per);
}
