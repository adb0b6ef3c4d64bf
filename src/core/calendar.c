/*
 * calendar.c -- the windows of calendar quotas: which second, minute,
 * hour, day, ISO week, month or year of a zone's calendar holds an
 * instant, and where first-use windows end.
 *
 * A window of a zone's calendar runs from one local boundary (midnight
 * for a day, Monday midnight for a week, the 1st for a month) to the
 * next, and a boundary is an instant: the first instant at which the
 * zone's clock reads the boundary or later.  That one rule covers what
 * daylight saving time does to a clock:
 *   - a boundary in a gap (a midnight the clock skips, as Sao Paulo's
 *     did when summer time began at 00:00) is the first instant after
 *     the gap, the transition itself;
 *   - a boundary the clock reads twice (an hour repeated when summer
 *     time ends) is the first time it reads it: the repeated hour
 *     belongs to the window that started then, which is an hour longer;
 *   - a day the clock skips whole (Samoa went from 2011-12-29 to
 *     2011-12-31) is an empty window that holds no instant.
 * Windows are contiguous and never overlap, so a count never belongs to
 * two windows and a clock reading a day's boundary twice never opens a
 * new day.
 *
 * Seconds, minutes and hours are not days: a "per second" quota must
 * count seconds, even in an hour the clock repeats.  Their windows are
 * those of the offset in force, cut at the zone's transitions: New
 * York's repeated 01:00 hour is two hours, each its own window, and Lord
 * Howe's half-hour change cuts an hour into two halves.
 *
 * tests/unit/zone_reference.py computes the same windows with Python's
 * zoneinfo (its own reading of the TZif files) and test_zone compares.
 */
#include "core/calendar.h"
#include "core/civil.h"

#define DAY 86400

/* The local boundary at or before local time lt (seconds). */
static int64_t unit_floor(uint8_t per, int64_t lt)
{
	int64_t z = sluice_floor_div(lt, DAY), y;
	unsigned m, d;

	switch (per) {
	case SLUICE_PER_SECOND:
		return lt;
	case SLUICE_PER_MINUTE:
		return lt - sluice_floor_mod(lt, 60);
	case SLUICE_PER_HOUR:
		return lt - sluice_floor_mod(lt, 3600);
	case SLUICE_PER_DAY:
		return z * DAY;
	case SLUICE_PER_WEEK:
		return (z - sluice_civil_iso_weekday(z)) * DAY;
	case SLUICE_PER_MONTH:
		sluice_civil_from_days(z, &y, &m, &d);
		return sluice_days_from_civil(y, m, 1) * DAY;
	default: /* SLUICE_PER_YEAR */
		sluice_civil_from_days(z, &y, &m, &d);
		return sluice_days_from_civil(y, 1, 1) * DAY;
	}
}

/* The local boundary after boundary lb. */
static int64_t unit_next(uint8_t per, int64_t lb)
{
	int64_t y;
	unsigned m, d;

	switch (per) {
	case SLUICE_PER_SECOND:
		return lb + 1;
	case SLUICE_PER_MINUTE:
		return lb + 60;
	case SLUICE_PER_HOUR:
		return lb + 3600;
	case SLUICE_PER_DAY:
		return lb + DAY;
	case SLUICE_PER_WEEK:
		return lb + 7 * DAY;
	case SLUICE_PER_MONTH:
		sluice_civil_from_days(sluice_floor_div(lb, DAY), &y, &m, &d);
		return sluice_days_from_civil(m == 12 ? y + 1 : y,
					      m == 12 ? 1 : m + 1, 1) *
		       DAY;
	default:
		sluice_civil_from_days(sluice_floor_div(lb, DAY), &y, &m, &d);
		return sluice_days_from_civil(y + 1, 1, 1) * DAY;
	}
}

/*
 * The first instant at which zone z's clock reads local time lt or later.
 * Walks the zone's periods of one offset from an instant whose clock
 * reads well before lt (offsets are under 26 hours, so 27 hours earlier
 * reads at least an hour before, and so does every instant before it):
 * in a period [u, next) of offset off the clock reads u + off onwards, so
 * the answer is u when that already reaches lt, lt - off when the clock
 * gets there before next, else it lies in a later period.
 */
static int64_t first_reading(const sluice_zone_t *z, int64_t lt)
{
	int64_t u = lt - 27 * 3600, next;
	int32_t off;
	int n;

	if (!z)
		return lt;
	for (n = 0; n < 64; n++) {
		off = sluice_zone_offset(z, u, &next);
		if (u + off >= lt)
			return u;
		if (lt - off < next)
			return lt - off;
		u = next;
	}
	return u; /* a zone changing offset 64 times in two days: none */
}

/* A second, minute or hour: the local one holding t at t's offset, cut
 * at the transitions before and after t. */
static int64_t short_window(const sluice_zone_t *z, uint8_t per, int64_t t,
			    int64_t *start)
{
	int64_t next, nx, u, lb;
	int32_t off = sluice_zone_offset(z, t, &next);
	int n;

	lb = unit_floor(per, t + off);
	u = lb - off;
	/* The last transition in (u, t], if any, starts the window. */
	sluice_zone_offset(z, u, &nx);
	for (n = 0; nx <= t && n < 64; n++) {
		u = nx;
		sluice_zone_offset(z, u, &nx);
	}
	*start = u;
	lb = unit_next(per, lb) - off;
	return next < lb ? next : lb;
}

int64_t sluice_calendar_window(const sluice_zone_t *z, uint8_t per, int64_t t,
			       int64_t *start)
{
	int64_t lb, b0, b1;
	int n;

	if (!z) {
		lb = unit_floor(per, t);
		*start = lb;
		return unit_next(per, lb);
	}
	if (per <= SLUICE_PER_HOUR)
		return short_window(z, per, t, start);
	lb = unit_floor(per, t + sluice_zone_offset(z, t, NULL));
	/* The clock reads lb at t, so b0 <= t. */
	b0 = first_reading(z, lb);
	lb = unit_next(per, lb);
	b1 = first_reading(z, lb);
	/* A clock set back past a boundary read it earlier: t then lies in
	 * a later window (the one that opened when it first read it). */
	for (n = 0; b1 <= t && n < 64; n++) {
		b0 = b1;
		lb = unit_next(per, lb);
		b1 = first_reading(z, lb);
	}
	*start = b0;
	return b1;
}

/* t moved by `months` calendar months (the day clamped to the target
 * month's length), same time of day, in UTC. */
static int64_t add_months(int64_t t, int64_t months)
{
	int64_t z = sluice_floor_div(t, DAY), y, mi;
	unsigned m, d, last;

	sluice_civil_from_days(z, &y, &m, &d);
	mi = y * 12 + (m - 1) + months;
	y = sluice_floor_div(mi, 12);
	m = (unsigned)(mi - y * 12) + 1;
	last = sluice_civil_month_days(y, m);
	if (d > last)
		d = last;
	return sluice_days_from_civil(y, m, d) * DAY + (t - z * DAY);
}

static int64_t first_use_step(uint8_t per, int64_t t, int sign)
{
	switch (per) {
	case SLUICE_PER_SECOND:
		return t + sign;
	case SLUICE_PER_MINUTE:
		return t + sign * 60;
	case SLUICE_PER_HOUR:
		return t + sign * 3600;
	case SLUICE_PER_DAY:
		return t + sign * DAY;
	case SLUICE_PER_WEEK:
		return t + sign * 7 * DAY;
	case SLUICE_PER_MONTH:
		return add_months(t, sign);
	default:
		return add_months(t, sign * 12);
	}
}

int64_t sluice_first_use_end(uint8_t per, int64_t start)
{
	return first_use_step(per, start, 1);
}

int64_t sluice_first_use_start(uint8_t per, int64_t end)
{
	return first_use_step(per, end, -1);
}
