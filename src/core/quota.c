/*
 * quota.c -- calendar quotas: a count per window of a calendar (or per
 * window opened by a key's first request), as a limit kind beside the
 * token bucket (sluice_quota.h).
 *
 * A quota is a sluice_limit_t whose window.per is set: capacity is the
 * quota, rate {1, 1} and tau the quota, so that the bucket code's checks
 * (sluice_limit_valid()) hold and a store handles it as any limit.  Its
 * state is end_s * 10^9 + used: the end of the window the count belongs
 * to and the count.  Read as a bucket's state (a TAT in microseconds
 * times 1000, plus a fraction) that is a TAT at the window's end plus
 * under a second, so the stores' expiry (sluice_state_expiry_us(), the
 * reclaim that drops states "in the past") forgets a quota's count just
 * after its window ends, with no code of their own, and eviction sees a
 * count as a debt lasting until then.
 *
 * The verbs below are what sluice_eval(), sluice_refund(), ... do when
 * given a quota (decide.c, reserve.c and carry.c branch here).  Every one
 * counts in W: the window of the state while that is live (its end after
 * now: a clock stepped back keeps counting in the window it had, so it
 * never grants), else the window holding now.
 */
#include "core/calendar.h"
#include "core/decide.h"
#include "sluice.h"
#include "util/errmsg.h"
#include "util/invariant.h"
#include "util/num.h"

#include <string.h>

#define US INT64_C(1000000)

static const char *const per_names[] = {"",    "second", "minute", "hour",
					"day", "week",	 "month",  "year"};

const char *sluice_per_name(uint8_t per)
{
	return per >= 1 && per <= SLUICE_PER_YEAR ? per_names[per] : "";
}

int sluice_per_parse(const char *text, uint8_t *per, char *err, size_t errlen)
{
	uint8_t i;
	size_t n;

	if (text && per) {
		for (i = 1; i <= SLUICE_PER_YEAR; i++) {
			n = strlen(per_names[i]);
			if (strncmp(text, per_names[i], n) == 0 &&
			    (text[n] == '\0' ||
			     (text[n] == 's' && text[n + 1] == '\0'))) {
				*per = i;
				return 0;
			}
		}
	}
	return sluice_fail(SLUICE_EINVAL, err, errlen,
			   "quota unit \"%.32s\": expected second, minute, "
			   "hour, day, week, month or year",
			   text ? text : "(null)");
}

int sluice_quota_init(sluice_limit_t *limit, uint64_t quota, uint8_t per,
		      uint8_t align, uint16_t zone, char *err, size_t errlen)
{
	if (!limit)
		return sluice_fail(SLUICE_EINVAL, err, errlen, "no limit");
	if (quota == 0 || quota > SLUICE_QUOTA_MAX)
		return sluice_fail(SLUICE_ERANGE, err, errlen,
				   "quota %llu is out of range (1 to %llu)",
				   (unsigned long long)quota,
				   (unsigned long long)SLUICE_QUOTA_MAX);
	if (per < 1 || per > SLUICE_PER_YEAR)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "quota unit %u is not a SLUICE_PER_* unit",
				   (unsigned)per);
	if (align != SLUICE_ALIGN_CALENDAR && align != SLUICE_ALIGN_FIRST_USE)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "quota alignment %u is neither calendar nor "
				   "first_use",
				   (unsigned)align);
	if (align == SLUICE_ALIGN_FIRST_USE)
		zone = 0; /* a first-use window is counted in UTC */
	else if (zone != 0 && !sluice_zone_get(zone))
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "time zone id %u was not loaded "
				   "(sluice_zone_load())",
				   (unsigned)zone);
	memset(limit, 0, sizeof(*limit));
	limit->capacity = quota;
	limit->rate.interval = 1;
	limit->rate.per = 1;
	limit->tau = quota;
	limit->window.per = per;
	limit->window.align = align;
	limit->window.zone = zone;
	return 0;
}

int sluice_quota_valid(const sluice_limit_t *l)
{
	const sluice_window_t *w = &l->window;

	return l->capacity >= 1 && l->capacity <= SLUICE_QUOTA_MAX &&
	       l->rate.interval == 1 && l->rate.per == 1 &&
	       l->tau == l->capacity && w->per >= 1 &&
	       w->per <= SLUICE_PER_YEAR && w->reserved == 0 &&
	       (w->align == SLUICE_ALIGN_CALENDAR
			? w->zone == 0 || sluice_zone_get(w->zone) != NULL
			: w->align == SLUICE_ALIGN_FIRST_USE && w->zone == 0);
}

/* ----------------------------------------------------------- windows */

static int64_t clamp_now(int64_t now_us)
{
	return now_us < 0		     ? 0
	       : now_us > SLUICE_TIME_MAX_US ? SLUICE_TIME_MAX_US
					     : now_us;
}

int64_t sluice_quota_calendar(const sluice_limit_t *limit, int64_t t_us,
			      int64_t *start_us)
{
	int64_t start, end;

	if (!sluice_limit_is_quota(limit)) {
		if (start_us)
			*start_us = 0;
		return 0;
	}
	end = sluice_calendar_window(sluice_zone_get(limit->window.zone),
				     limit->window.per, clamp_now(t_us) / US,
				     &start);
	if (start_us)
		*start_us = start * US;
	return end * US;
}

/* The window a request at now_us opens (no live state): the calendar's,
 * or one unit from now's second. */
static int64_t window_at(const sluice_limit_t *l, int64_t now_us,
			 int64_t *start_us)
{
	int64_t s;

	if (l->window.align != SLUICE_ALIGN_FIRST_USE)
		return sluice_quota_calendar(l, now_us, start_us);
	s = now_us / US;
	if (start_us)
		*start_us = s * US;
	return sluice_first_use_end(l->window.per, s) * US;
}

uint64_t sluice_quota_used(sluice_state_t state, int64_t now_us,
			   int64_t *end_us)
{
	int64_t end;

	if (end_us)
		*end_us = 0;
	if (state <= 0)
		return 0;
	end = state / SLUICE_QUOTA_STATE_SCALE * US;
	if (end <= now_us)
		return 0; /* the window is over: unused */
	if (end_us)
		*end_us = end;
	return (uint64_t)(state % SLUICE_QUOTA_STATE_SCALE);
}

sluice_state_t sluice_quota_state(int64_t end_us, uint64_t used)
{
	if (used == 0 || end_us <= 0)
		return 0;
	if (used > SLUICE_QUOTA_MAX)
		used = SLUICE_QUOTA_MAX;
	return end_us / US * SLUICE_QUOTA_STATE_SCALE + (int64_t)used;
}

uint64_t sluice_quota_live(const sluice_limit_t *l, sluice_state_t state,
			   int64_t now_us, int64_t *end_us)
{
	uint64_t used = sluice_quota_used(state, now_us, end_us);

	if (*end_us == 0)
		*end_us = window_at(l, now_us, NULL);
	/* W holds now: the verbs count in it and wait until its end. */
	SLUICE_ASSERT(*end_us > now_us);
	return used;
}

int64_t sluice_quota_window(const sluice_limit_t *limit, sluice_state_t state,
			    int64_t now_us, int64_t *start_us)
{
	int64_t end;

	if (!sluice_limit_is_quota(limit)) {
		if (start_us)
			*start_us = 0;
		return 0;
	}
	now_us = clamp_now(now_us);
	sluice_quota_used(state, now_us, &end);
	if (end == 0)
		return window_at(limit, now_us, start_us);
	if (start_us) {
		/* The state keeps only its window's end: its start is the
		 * calendar's, or one unit back. */
		if (limit->window.align == SLUICE_ALIGN_FIRST_USE)
			*start_us = sluice_first_use_start(limit->window.per,
							   end / US) *
				    US;
		else
			sluice_quota_calendar(limit, end - US, start_us);
	}
	return end;
}

/* ------------------------------------------------------------- verbs */

void sluice_quota_eval(const sluice_limit_t *l, sluice_state_t state,
		       int64_t now_us, uint64_t cost, sluice_state_t *next,
		       sluice_decision_t *d)
{
	const uint64_t q = l->capacity;
	int64_t end;
	uint64_t used, left;

	now_us = clamp_now(now_us);
	used = sluice_quota_live(l, state, now_us, &end);
	left = (uint64_t)(end - now_us); /* end > now_us */
	*next = state;
	d->which = 0;
	d->limit = q;
	d->never = 0;
	d->remaining = used >= q ? 0 : q - used;
	d->reset_after_us = used > 0 ? left : 0;
	if (cost > q) {
		/* More than a whole window holds: never. */
		d->allowed = 0;
		d->never = 1;
		d->retry_after_us = UINT64_MAX;
		return;
	}
	/* used <= SLUICE_QUOTA_MAX and cost <= q: no overflow. */
	if (used + cost <= q) {
		d->allowed = 1;
		d->retry_after_us = 0;
		if (cost > 0) {
			/* The count stored is within [1, quota], in W. */
			*next = sluice_quota_state(end, used + cost);
			SLUICE_ASSERT(sluice_quota_used(*next, now_us, NULL) ==
				      used + cost);
			d->remaining -= cost;
			d->reset_after_us = left;
		}
	} else {
		/* The next window starts unused. */
		d->allowed = 0;
		d->retry_after_us = left;
	}
}

sluice_state_t sluice_quota_refund(const sluice_limit_t *l,
				   sluice_state_t state, int64_t now_us,
				   uint64_t cost)
{
	int64_t end;
	uint64_t used;

	now_us = clamp_now(now_us);
	used = sluice_quota_live(l, state, now_us, &end);
	return sluice_quota_state(end, used - (cost < used ? cost : used));
}

sluice_state_t sluice_quota_penalize(const sluice_limit_t *l,
				     sluice_state_t state, int64_t now_us,
				     uint64_t cost)
{
	int64_t end;
	uint64_t used;

	if (cost == 0)
		return state;
	now_us = clamp_now(now_us);
	used = sluice_quota_live(l, state, now_us, &end);
	/* A debt within W only, at most SLUICE_QUOTA_MAX. */
	if (cost > SLUICE_QUOTA_MAX - used)
		used = SLUICE_QUOTA_MAX;
	else
		used += cost;
	return sluice_quota_state(end, used);
}

sluice_state_t sluice_quota_block(const sluice_limit_t *l, sluice_state_t state,
				  int64_t now_us, uint64_t ms)
{
	int64_t end;
	uint64_t used;

	if (ms == 0)
		return state;
	now_us = clamp_now(now_us);
	used = sluice_quota_live(l, state, now_us, &end);
	/* W is spent; the next window starts unused, however long the
	 * block asked for. */
	return sluice_quota_state(end, used > l->capacity ? used : l->capacity);
}

sluice_state_t sluice_quota_set(const sluice_limit_t *l, int64_t now_us,
				sluice_state_t state, uint64_t remaining)
{
	int64_t end;

	now_us = clamp_now(now_us);
	sluice_quota_live(l, state, now_us, &end);
	if (remaining > l->capacity)
		remaining = l->capacity;
	return sluice_quota_state(end, l->capacity - remaining);
}
