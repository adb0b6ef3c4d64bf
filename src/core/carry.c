/*
 * carry.c -- a bucket's usage across a change of its limit.
 *
 * A bucket is named by its limit (limit_id.c), so when an operator changes
 * a named limit's capacity or rate the key's state stays under the old
 * limit's name and the new limit would find none: a full bucket, handed to
 * the very client the change was meant to slow down.  The stores therefore
 * carry the old state over when the new bucket is first touched, and the
 * rule is this one function, which every store (memory, shared memory,
 * the Redis module) calls and the Redis script (carry.lua) repeats:
 *
 *   what was used stays used: the tokens the old bucket is short of full
 *   are the tokens the new bucket is short of full, never more than the
 *   new capacity (a debt beyond a bucketful is cut there) and never
 *   negative; the new bucket then refills at the new rate.
 *
 * When the rate is the same (only the capacity changed) the shortfall is
 * kept exactly, to the unit.  When the rate changed, the tokens used are
 * counted whole and rounded up: a token partly refilled at the old rate
 * counts as used, so a carry never grants part of a token, and the
 * arithmetic stays within 2^53 where the Lua script does it in doubles.
 */
#include "core/decide.h"
#include "sluice.h"
#include "util/invariant.h"
#include "util/num.h"

uint64_t sluice_carry_units(const sluice_limit_t *from, uint64_t D,
			    const sluice_limit_t *to)
{
	uint64_t used;

	if (D == 0)
		return 0;
	if (from->rate.interval == to->rate.interval &&
	    from->rate.per == to->rate.per)
		return D < to->tau ? D : to->tau;
	/* Whole tokens, a part counted as one. */
	used = D / from->rate.interval + (D % from->rate.interval != 0);
	if (used >= to->capacity)
		return to->tau;
	return used * to->rate.interval; /* < capacity * interval = tau */
}

/*
 * A carry to or from a quota, in whole requests: a bucket's shortfall in
 * whole tokens (a token partly refilled counting as used) or a quota's
 * count in its live window becomes, to a quota, the count of its current
 * window (at most its quota), to a bucket that many tokens short of full
 * (at most its capacity).
 */
static sluice_state_t carry_quota(const sluice_limit_t *from,
				  sluice_state_t state,
				  const sluice_limit_t *to, int64_t now_us)
{
	uint64_t used, D;

	if (sluice_limit_is_quota(from)) {
		used = sluice_quota_used(state, now_us, NULL);
	} else {
		D = decide_shortfall(state, now_us, from->rate.per);
		used = D / from->rate.interval + (D % from->rate.interval != 0);
	}
	if (used > to->capacity)
		used = to->capacity;
	if (used == 0)
		return 0;
	SLUICE_ASSERT(used <= to->capacity);
	if (sluice_limit_is_quota(to))
		return sluice_quota_state(
			sluice_quota_window(to, 0, now_us, NULL), used);
	return decide_encode(now_us, used * to->rate.interval, to->rate.per);
}

sluice_state_t sluice_carry(const sluice_limit_t *from, sluice_state_t state,
			    const sluice_limit_t *to, int64_t now_us)
{
	uint64_t D;

	if (now_us < 0)
		now_us = 0;
	else if (now_us > SLUICE_TIME_MAX_US)
		now_us = SLUICE_TIME_MAX_US;
	if (sluice_limit_is_quota(from) || sluice_limit_is_quota(to))
		return carry_quota(from, state, to, now_us);
	D = sluice_carry_units(
		from, decide_shortfall(state, now_us, from->rate.per), to);
	SLUICE_ASSERT(D <= to->tau); /* at most an empty bucket */
	return D == 0 ? 0 : decide_encode(now_us, D, to->rate.per);
}
