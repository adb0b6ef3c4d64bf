/*
 * decide.h -- the bucket math of decide.c in line, for the callers whose
 * every instruction counts (the memory store's single take: a call's own
 * instructions there delay the next take's cache miss).  decide.c's
 * sluice_eval() is sluice_eval_inline(); the file's header comment says
 * what the arithmetic is.
 */
#ifndef SLUICE_CORE_DECIDE_H
#define SLUICE_CORE_DECIDE_H

#include "core/calendar.h"
#include "sluice.h"
#include "util/invariant.h"
#include "util/num.h"

/* sluice_limit_valid() in line (limit_id.c's is this): capacity and
 * interval >= 1 (nothing downstream divides by zero), per in range, and
 * tau = capacity * interval <= 2^52; no division.  A quota (window.per
 * set) is checked out of line (quota.c). */
static inline int sluice_limit_valid_inline(const sluice_limit_t *l)
{
	if (__builtin_expect(l->window.per != 0, 0))
		return sluice_quota_valid(l);
	return l->capacity >= 1 && l->rate.interval >= 1 &&
	       l->rate.per - 1u < SLUICE_RATE_PER_MAX &&
	       l->tau <= SLUICE_UNITS_MAX &&
	       (unsigned __int128)l->capacity * l->rate.interval == l->tau;
}

/* ceil(u / per) for the unit -> microsecond conversion.  Most rates are
 * whole microseconds per token (per = 1): no division then. */
static inline uint64_t decide_units_to_us_ceil(uint64_t u, uint32_t per)
{
	return per == 1 ? u : sluice_div_ceil(u, per);
}

/*
 * The shortfall D of `state` at `now`, in units, saturated at
 * SLUICE_UNITS_MAX * 2 (still "more than tau", and far from overflow).  A
 * fraction written by a policy with a larger `per` is clamped into range.
 */
static inline uint64_t decide_shortfall(sluice_state_t state, int64_t now_us,
					uint32_t per)
{
	const uint64_t cap = SLUICE_UNITS_MAX * 2;
	int64_t tat_us;
	uint64_t frac, delta;

	if (state <= 0)
		return 0;
	tat_us = state / 1000;
	frac = (uint64_t)(state % 1000);
	if (frac >= per)
		frac = per - 1;
	if (tat_us < now_us)
		return 0;
	delta = (uint64_t)tat_us - (uint64_t)now_us;
	if (delta >= (per == 1 ? cap : cap / per))
		return cap;
	return delta * per + frac;
}

/* The state whose shortfall at now_us is d units (d > 0). */
static inline sluice_state_t decide_encode(int64_t now_us, uint64_t d,
					   uint32_t per)
{
	/* The product below stays inside int64: every caller clamps now_us
	 * and bounds d (by a debt of at most 2^49 us, by tau, or below a
	 * shortfall read from a state, which was inside int64 itself). */
	SLUICE_ASSERT(now_us >= 0 && now_us <= SLUICE_TIME_MAX_US &&
		      d / per <= (uint64_t)(INT64_MAX / 1000 - now_us));
	if (per == 1)
		return (now_us + (int64_t)d) * 1000;
	return (now_us + (int64_t)(d / per)) * 1000 + (int64_t)(d % per);
}

static inline void sluice_eval_inline(const sluice_limit_t *limit,
				      sluice_state_t state, int64_t now_us,
				      uint64_t cost, sluice_state_t *next,
				      sluice_decision_t *d)
{
	const uint64_t t = limit->rate.interval;
	const uint32_t per = limit->rate.per;
	const uint64_t tau = limit->tau;
	uint64_t D;

	/* A calendar quota: a count per window (quota.c). */
	if (__builtin_expect(limit->window.per != 0, 0)) {
		sluice_quota_eval(limit, state, now_us, cost, next, d);
		return;
	}
	/* Keep (now + tau) * 1000 inside int64 whatever the caller's clock. */
	if (now_us < 0)
		now_us = 0;
	else if (now_us > SLUICE_TIME_MAX_US)
		now_us = SLUICE_TIME_MAX_US;
	D = decide_shortfall(state, now_us, per);

	*next = state;
	d->which = 0;
	d->limit = limit->capacity;
	d->never = 0;
	d->remaining = D >= tau ? 0 : (tau - D) / t;
	SLUICE_ASSERT(d->remaining <= limit->capacity);

	if (cost > limit->capacity) {
		/* More than a full bucket: waiting cannot help. */
		d->allowed = 0;
		d->never = 1;
		d->retry_after_us = UINT64_MAX;
		d->reset_after_us = decide_units_to_us_ceil(D, per);
		return;
	}
	/* cost <= capacity, so cost * t <= tau <= 2^52: no overflow. */
	if (D + cost * t <= tau) {
		uint64_t nd = D + cost * t;

		/* What is left covers the cost, and the state stored holds a
		 * shortfall of at most tau: its TAT is at most now + C*T. */
		SLUICE_ASSERT(d->remaining >= cost && nd <= tau);
		d->allowed = 1;
		d->retry_after_us = 0;
		/* No second division for what remains: with cost > 0,
		 * D < tau and (tau - D - cost * t) / t is exactly
		 * (tau - D) / t - cost. */
		if (cost > 0) {
			*next = decide_encode(now_us, nd, per);
			d->remaining -= cost;
			/* The state reads back as the shortfall written. */
			SLUICE_ASSERT(decide_shortfall(*next, now_us, per) ==
				      nd);
		}
		d->reset_after_us = decide_units_to_us_ceil(nd, per);
	} else {
		d->reset_after_us = decide_units_to_us_ceil(D, per);
		d->allowed = 0;
		d->retry_after_us =
			decide_units_to_us_ceil(D + cost * t - tau, per);
		/* Refused: a wait of at least a microsecond, and the state
		 * as it was. */
		SLUICE_ASSERT(d->retry_after_us > 0 && *next == state);
	}
}

#endif
