/*
 * reserve.c -- reservations (a turn to wait for) and setting a bucket's
 * tokens, on decide.c's arithmetic.
 *
 * A take is allowed iff the shortfall after it, D + cost*T, is at most
 * tau.  A reservation charges whatever that shortfall is, and answers how
 * long until it is at most tau again: (D + cost*T - tau) / per
 * microseconds, rounded up.  That instant is the new TAT less tau, so
 * consecutive reservations of one bucket get turns exactly T apart
 * whoever makes them: the state is the queue.  The Redis script
 * (src/store/redis/reserve.lua) repeats this file's computation; a unit
 * test replays both (tests/unit/test_redis_script.c).
 */
#include "core/decide.h"
#include "sluice.h"
#include "util/num.h"

/* The decision one limit reports after a reservation: the bucket as the
 * charge leaves it (nd, its shortfall), or as it is when refused. */
static void reserve_decision(const sluice_limit_t *l, uint64_t nd,
			     uint64_t left, sluice_decision_t *d)
{
	d->limit = l->capacity;
	d->never = 0;
	if (sluice_limit_is_quota(l)) {
		/* nd is the count, left the time to W's end. */
		d->remaining = nd >= l->capacity ? 0 : l->capacity - nd;
		d->reset_after_us = nd > 0 ? left : 0;
		return;
	}
	d->remaining = nd >= l->tau ? 0 : (l->tau - nd) / l->rate.interval;
	d->reset_after_us = decide_units_to_us_ceil(nd, l->rate.per);
}

int sluice_reserve_all(const sluice_limit_t *limits,
		       const sluice_state_t *states, size_t n, int64_t now_us,
		       uint64_t cost, uint64_t max_wait_us,
		       sluice_state_t *next, sluice_decision_t *summary,
		       uint64_t *wait_us)
{
	uint64_t D[SLUICE_MAX_LIMITS], w[SLUICE_MAX_LIMITS];
	uint64_t nd[SLUICE_MAX_LIMITS], left[SLUICE_MAX_LIMITS];
	int64_t end[SLUICE_MAX_LIMITS];
	uint64_t turn = 0, max_wait, quota_wait = 0;
	size_t i, worst = 0;
	int never = 0, ok;

	if (n > SLUICE_MAX_LIMITS)
		n = SLUICE_MAX_LIMITS;
	if (now_us < 0)
		now_us = 0;
	else if (now_us > SLUICE_TIME_MAX_US)
		now_us = SLUICE_TIME_MAX_US;
	max_wait = max_wait_us < SLUICE_WAIT_MAX_US ? max_wait_us
						    : SLUICE_WAIT_MAX_US;
	for (i = 0; i < n; i++) {
		const sluice_limit_t *l = &limits[i];
		uint64_t x;

		left[i] = 0;
		end[i] = 0;
		if (sluice_limit_is_quota(l)) {
			/* A quota: D is W's count.  It passes now or not at
			 * all (the wait to W's end, charging nothing). */
			D[i] = sluice_quota_live(l, states[i], now_us, &end[i]);
			left[i] = (uint64_t)(end[i] - now_us);
			if (cost > l->capacity) {
				never = 1;
				w[i] = UINT64_MAX;
			} else if (D[i] + cost <= l->capacity) {
				w[i] = 0;
			} else {
				w[i] = left[i];
				quota_wait = left[i];
			}
		} else {
			D[i] = decide_shortfall(states[i], now_us, l->rate.per);
			if (cost > l->capacity) {
				never = 1;
				w[i] = UINT64_MAX;
			} else {
				/* D <= 2^53 and cost * T <= tau <= 2^52: no
				 * overflow. */
				x = D[i] + cost * l->rate.interval;
				w[i] = x <= l->tau ? 0
						   : decide_units_to_us_ceil(
							     x - l->tau,
							     l->rate.per);
			}
		}
		if (w[i] > turn) {
			turn = w[i];
			worst = i;
		}
	}
	ok = !never && turn <= max_wait && quota_wait == 0;
	/* A quota counts the request in W: a turn at or past W's end would
	 * run it in the next window, so it is refused. */
	for (i = 0; i < n; i++)
		if (sluice_limit_is_quota(&limits[i]) && turn >= left[i] &&
		    !never) {
			ok = 0;
			if (left[i] > quota_wait)
				quota_wait = left[i];
		}
	for (i = 0; i < n; i++) {
		const sluice_limit_t *l = &limits[i];
		const uint64_t per = l->rate.per;
		uint64_t base = D[i];

		nd[i] = D[i];
		if (!ok || cost == 0)
			continue;
		if (sluice_limit_is_quota(l)) {
			nd[i] = D[i] + cost; /* <= capacity: it passed */
			continue;
		}
		/*
		 * The limit that sets the turn is charged as a take would
		 * charge it (its turn is then exact, not rounded up to a
		 * microsecond); the others at the turn, so none counts the
		 * request before it runs.  turn <= SLUICE_WAIT_MAX_US keeps
		 * turn * per below 2^50.
		 */
		if (w[i] != turn && turn * per > base)
			base = turn * per;
		nd[i] = base + cost * l->rate.interval;
		if (nd[i] > sluice_debt_max_units(l))
			ok = 0; /* beyond the exact range: refused */
	}
	for (i = 0; i < n; i++) {
		if (!ok)
			nd[i] = D[i];
		if (!ok || nd[i] == D[i])
			next[i] = states[i];
		else if (sluice_limit_is_quota(&limits[i]))
			next[i] = sluice_quota_state(end[i], nd[i]);
		else
			next[i] = decide_encode(now_us, nd[i],
						limits[i].rate.per);
	}
	if (summary && n > 0) {
		/* The latest turn; among equal ones, the fewest left. */
		sluice_decision_t d;

		reserve_decision(&limits[worst], nd[worst], left[worst],
				 summary);
		summary->which = worst;
		for (i = 0; i < n; i++) {
			reserve_decision(&limits[i], nd[i], left[i], &d);
			if (w[i] == w[worst] &&
			    d.remaining < summary->remaining) {
				*summary = d;
				summary->which = i;
			}
		}
		summary->allowed = ok;
		if (ok)
			summary->retry_after_us = turn;
		else if (never)
			summary->retry_after_us = UINT64_MAX;
		else if (quota_wait > 0)
			/* A quota's window must end first (and the turn
			 * come within max_wait). */
			summary->retry_after_us =
				turn > max_wait && turn - max_wait > quota_wait
					? turn - max_wait
					: quota_wait;
		else if (turn <= max_wait)
			summary->retry_after_us = UINT64_MAX;
		else
			summary->retry_after_us = turn - max_wait;
		summary->never = never;
	}
	if (wait_us)
		*wait_us = never ? UINT64_MAX : turn;
	return ok;
}

sluice_state_t sluice_set_remaining(const sluice_limit_t *limit, int64_t now_us,
				    uint64_t remaining)
{
	if (sluice_limit_is_quota(limit))
		return sluice_quota_set(limit, now_us, 0, remaining);
	if (remaining >= limit->capacity)
		return 0;
	if (now_us < 0)
		now_us = 0;
	else if (now_us > SLUICE_TIME_MAX_US)
		now_us = SLUICE_TIME_MAX_US;
	/* remaining < capacity, so the shortfall is at least one T and at
	 * most tau. */
	return decide_encode(now_us,
			     limit->tau - remaining * limit->rate.interval,
			     limit->rate.per);
}
