/*
 * sluice_quota.h -- calendar quotas: a count per calendar window (10,000
 * calls a month, reset on the 1st) as a limit kind beside the token
 * bucket.  Part of libsluice's core: include sluice.h, which includes
 * this after the types it uses.
 *
 * A quota is a sluice_limit_t whose window.per is not 0.  Every function
 * of sluice.h and sluice_reserve.h that takes limits takes quotas too, and
 * every store keeps a quota's state as it keeps a bucket's: one
 * sluice_state_t per key and limit, named by sluice_limit_id(), forgotten
 * at sluice_state_expiry_us() (just after the window's end).  So a rule,
 * an Envoy request or a Node policy may mix buckets and quotas, decided
 * all-or-nothing (a refused request charges neither).
 *
 * The state of a quota:  end_s * 10^9 + used
 *   end_s  the end of the window the count belongs to, in whole seconds
 *          since the epoch (every window starts and ends on a second);
 *   used   the count charged in that window, 1 .. SLUICE_QUOTA_MAX.
 * 0 (or a state whose end_s is not after now) is an unused window.  Its
 * expiry (ceil(state / 1000) microseconds) is end_s * 10^6 + ceil(used /
 * 1000): never before the window's end, at most 1 s after.  A state whose
 * window lies ahead of `now` (the clock stepped back across a boundary)
 * keeps counting in that window: a clock stepping back never grants.
 *
 * What each verb does to a quota, at `now` (W = the window that holds
 * now, or the live window of the state):
 *   take/eval   allowed iff used + cost <= quota; remaining = quota -
 *               used; reset_after_us = W's end - now when used > 0;
 *               retry_after_us = W's end - now when refused (the next
 *               window is unused), UINT64_MAX when cost > quota (never);
 *   refund      used -= min(cost, used);
 *   penalize    used += cost (up to SLUICE_QUOTA_MAX: a debt carried
 *               within W only, a new window starts unused);
 *   block       used = max(used, quota): W is spent (a block longer than
 *               W ends with W);
 *   set         used = quota - min(remaining, quota) in W;
 *   reserve     reserved at once when the take would pass (wait 0), else
 *               refused, charging nothing, with the wait until W's end;
 *   carry       what was used stays used: to a quota, the tokens the
 *               old limit was short of full (a bucket: its shortfall in
 *               whole tokens, a partly refilled token counting as used;
 *               a quota: its count) become the count of the quota's
 *               current window, at most its quota.  To a bucket, a
 *               quota's count becomes that many tokens short of full.
 */
#ifndef SLUICE_QUOTA_H
#define SLUICE_QUOTA_H

#ifndef SLUICE_H
#error "include sluice.h, which includes sluice_quota.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* window.per: the calendar unit of a quota. */
#define SLUICE_PER_SECOND 1
#define SLUICE_PER_MINUTE 2
#define SLUICE_PER_HOUR	  3
#define SLUICE_PER_DAY	  4
#define SLUICE_PER_WEEK	  5 /* ISO 8601: Monday 00:00 to Monday 00:00 */
#define SLUICE_PER_MONTH  6
#define SLUICE_PER_YEAR	  7

/* window.align */
#define SLUICE_ALIGN_CALENDAR                                                  \
	0 /* windows follow the calendar of the                                \
	     limit's zone (the default) */
#define SLUICE_ALIGN_FIRST_USE                                                 \
	1 /* a window opens at the key's first                                 \
	     request (that second) and lasts one                               \
	     unit: a month from Jan 31 10:00 ends                              \
	     Feb 28 (29) 10:00, the last day of a                              \
	     shorter month */

/* The largest quota (and count) a window holds. */
#define SLUICE_QUOTA_MAX UINT64_C(999999999)

/* The states encode: end_s * SLUICE_QUOTA_STATE_SCALE + used. */
#define SLUICE_QUOTA_STATE_SCALE INT64_C(1000000000)

/*
 * Loads the IANA time zone `name` ("Europe/Berlin", "UTC") from the
 * system's zoneinfo (/usr/share/zoneinfo, TZif versions 1 to 4) and
 * writes its id (for window.zone) to *id: 0 for "UTC" and "Etc/UTC".  The
 * same name always gets the same id in one process; zones are loaded once
 * and kept for the process's life (at most 1024), so ids stay valid and
 * limits holding them may be copied freely.  Thread-safe.  Returns 0, or
 * SLUICE_EINVAL (no such zone, a name with "..", a file that is not TZif)
 * or SLUICE_ENOMEM / SLUICE_ERANGE (too many zones), with a message in err
 * naming the zone.
 */
SLUICE_API int sluice_zone_load(const char *name, uint16_t *id, char *err,
				size_t errlen);

/* The name of a loaded zone ("UTC" for 0; "" for an id never given). */
SLUICE_API const char *sluice_zone_name(uint16_t id);

/*
 * Parses a quota's unit ("second", "minute", "hour", "day", "week",
 * "month", "year"; plural forms too) into SLUICE_PER_*.  Returns 0, or
 * SLUICE_EINVAL with a message listing the units.
 */
SLUICE_API int sluice_per_parse(const char *text, uint8_t *per, char *err,
				size_t errlen);

/* The unit's name ("month"), "" for 0 or an unknown value. */
SLUICE_API const char *sluice_per_name(uint8_t per);

/*
 * Builds a quota: `quota` requests per `per` (SLUICE_PER_*), windows
 * aligned by `align` (SLUICE_ALIGN_*), in the zone `zone` (0 for UTC,
 * else an id from sluice_zone_load(); first-use windows ignore it and
 * take 0).  Fails with SLUICE_ERANGE when quota is 0 or above
 * SLUICE_QUOTA_MAX, SLUICE_EINVAL for an unknown unit, align or zone id,
 * with a message in err.
 */
SLUICE_API int sluice_quota_init(sluice_limit_t *limit, uint64_t quota,
				 uint8_t per, uint8_t align, uint16_t zone,
				 char *err, size_t errlen);

/* 1 when the limit is a calendar quota. */
static inline int sluice_limit_is_quota(const sluice_limit_t *limit)
{
	return limit->window.per != 0;
}

/*
 * The window a take at now_us of a key in `state` counts in: its start
 * and end (microseconds since the epoch; *start_us may be NULL).  For a
 * state whose window is still live (its end is after now_us) that
 * window; else the window holding now_us (calendar), or the one opening
 * at now_us's second (first use).  Returns the end.  (A state keeps
 * only its window's end: the start of a live first-use window is given
 * as one unit before its end, which for a month opened on a 29th to 31st
 * is up to three days before it opened.)  For a token bucket it returns 0
 * and writes 0.
 */
SLUICE_API int64_t sluice_quota_window(const sluice_limit_t *limit,
				       sluice_state_t state, int64_t now_us,
				       int64_t *start_us);

/*
 * The calendar window holding t_us for a quota (ignoring align: the
 * calendar of the quota's zone), as sluice_quota_window() computes it.
 * A day, week, month or year of a zone runs from one local boundary
 * (midnight, Monday's, the 1st's) to the next, a boundary being the first
 * instant the zone's clock reads it or later: one the clock skips (a
 * midnight in a summer-time gap) is the end of the gap, one it reads
 * twice is the first reading (a day with a repeated hour is 25 hours
 * long, and counts once); a day the zone skipped whole holds no instant.
 * Seconds, minutes and hours are those of the UTC offset in force, cut
 * where the offset changes (a repeated hour is two windows).  Every
 * window starts and ends on a whole second.  The Redis client sends these
 * boundaries to the server, whose clock picks among them.  Returns the end,
 * writes the start (may be NULL).
 */
SLUICE_API int64_t sluice_quota_calendar(const sluice_limit_t *limit,
					 int64_t t_us, int64_t *start_us);

/* The count a quota's state holds at now_us (0 when its window is over)
 * and, in *end_us (may be NULL), its window's end (0 when over). */
SLUICE_API uint64_t sluice_quota_used(sluice_state_t state, int64_t now_us,
				      int64_t *end_us);

/* The state of a count `used` in the window ending at end_us (a whole
 * second): 0 when used is 0; used above SLUICE_QUOTA_MAX is that. */
SLUICE_API sluice_state_t sluice_quota_state(int64_t end_us, uint64_t used);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_QUOTA_H */
