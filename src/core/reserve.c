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
#include "util/invariant.h"
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

/*
 * How long limit l makes a reservation of cost wait at now_us, from its
 * state (UINT64_MAX and *never set: cost is past its capacity).  Its
 * shortfall in *D (a quota: the count of its window W); for a quota, W's
 * end in *end and the time to it in *left (else both 0), and that time in
 * *quota_wait too when W has no room for cost.
 */
static uint64_t limit_wait(const sluice_limit_t *l, sluice_state_t state,
			   int64_t now_us, uint64_t cost, uint64_t *D,
			   uint64_t *left, int64_t *end, int *never,
			   uint64_t *quota_wait)
{
	uint64_t x;

	*left = 0;
	*end = 0;
	if (sluice_limit_is_quota(l)) {
		/* A quota: D is W's count.  It passes now or not at all (the
		 * wait to W's end, charging nothing). */
		*D = sluice_quota_live(l, state, now_us, end);
		*left = (uint64_t)(*end - now_us);
		if (cost > l->capacity) {
			*never = 1;
			return UINT64_MAX;
		}
		if (*D + cost <= l->capacity)
			return 0;
		*quota_wait = *left;
		return *left;
	}
	*D = decide_shortfall(state, now_us, l->rate.per);
	if (cost > l->capacity) {
		*never = 1;
		return UINT64_MAX;
	}
	/* D <= 2^53 and cost * T <= tau <= 2^52: no overflow. */
	x = *D + cost * l->rate.interval;
	return x <= l->tau ? 0
			   : decide_units_to_us_ceil(x - l->tau, l->rate.per);
}

/* A reservation's retry_after_us: its turn when it was reserved, else
 * when one with the same max_wait could be (UINT64_MAX: never). */
static uint64_t retry_after(int ok, int never, uint64_t turn, uint64_t max_wait,
			    uint64_t quota_wait)
{
	if (ok)
		return turn;
	if (never)
		return UINT64_MAX;
	if (quota_wait > 0)
		/* A quota's window must end first (and the turn come within
		 * max_wait). */
		return turn > max_wait && turn - max_wait > quota_wait
			       ? turn - max_wait
			       : quota_wait;
	if (turn <= max_wait)
		return UINT64_MAX;
	return turn - max_wait;
}

/*
 * The shortfalls a reserved request leaves (nd[], from D[]): the limit
 * that sets the turn is charged as a take would charge it (its turn is
 * then exact, not rounded up to a microsecond); the others at the turn,
 * so none counts the request before it runs.  turn <=
 * SLUICE_WAIT_MAX_US keeps turn * per below 2^50.  0 when a charge goes
 * beyond the exact range (refused).
 */
static int charge_at_turn(const sluice_limit_t *limits, size_t n,
			  const uint64_t *D, const uint64_t *w, uint64_t turn,
			  uint64_t cost, uint64_t *nd)
{
	size_t i;

	for (i = 0; i < n; i++) {
		const sluice_limit_t *l = &limits[i];
		uint64_t base = D[i];

		if (sluice_limit_is_quota(l)) {
			nd[i] = D[i] + cost; /* <= capacity: it passed */
			continue;
		}
		if (w[i] != turn && turn * l->rate.per > base)
			base = turn * l->rate.per;
		nd[i] = base + cost * l->rate.interval;
		if (nd[i] > sluice_debt_max_units(l))
			return 0;
	}
	return 1;
}

/* Which limit a reservation's summary reports, and its decision (all
 * but allowed, retry_after_us and never): the latest turn (worst's, w[]);
 * among equal ones, the fewest left. */
static void reserve_summary(const sluice_limit_t *limits, size_t n,
			    const uint64_t *w, const uint64_t *nd,
			    const uint64_t *left, size_t worst,
			    sluice_decision_t *summary)
{
	sluice_decision_t d;
	size_t i;

	reserve_decision(&limits[worst], nd[worst], left[worst], summary);
	summary->which = worst;
	for (i = 0; i < n; i++) {
		reserve_decision(&limits[i], nd[i], left[i], &d);
		if (w[i] == w[worst] && d.remaining < summary->remaining) {
			*summary = d;
			summary->which = i;
		}
	}
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
		w[i] = limit_wait(&limits[i], states[i], now_us, cost, &D[i],
				  &left[i], &end[i], &never, &quota_wait);
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
	for (i = 0; i < n; i++)
		nd[i] = D[i];
	if (ok && cost > 0)
		ok = charge_at_turn(limits, n, D, w, turn, cost, nd);
	SLUICE_ASSERT(!ok || turn <= max_wait);
	for (i = 0; i < n; i++) {
		if (!ok)
			nd[i] = D[i];
		/* A reservation's debt is what max_wait allows: at its turn
		 * (at most max_wait away) every bucket it charged is back
		 * within tau, and a quota's count within its quota. */
		SLUICE_ASSERT(
			!ok ||
			(sluice_limit_is_quota(&limits[i])
				 ? nd[i] <= limits[i].capacity
				 : nd[i] <= limits[i].tau +
						    turn * limits[i].rate.per));
		if (!ok || nd[i] == D[i])
			next[i] = states[i];
		else if (sluice_limit_is_quota(&limits[i]))
			next[i] = sluice_quota_state(end[i], nd[i]);
		else
			next[i] = decide_encode(now_us, nd[i],
						limits[i].rate.per);
	}
	if (summary && n > 0) {
		reserve_summary(limits, n, w, nd, left, worst, summary);
		summary->allowed = ok;
		summary->retry_after_us =
			retry_after(ok, never, turn, max_wait, quota_wait);
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
