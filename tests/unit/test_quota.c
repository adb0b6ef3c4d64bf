/*
 * test_quota.c -- calendar quotas, pure and on the memory store: the
 * issue's scenario (a {quota: 3, per: day} key refused at 23:59:59 UTC is
 * allowed at 00:00:00 with 2 remaining), every verb (take, peek, refund,
 * penalize, block, set, reserve, carry, expiry), the calendar (months of
 * every length, leap years, year ends, ISO weeks and week 53, first-use
 * windows clamped at a month's end), a clock stepping back that must
 * never grant, mixed bucket + quota takes that charge neither when one
 * refuses, costs no window holds, and bad input.  Instants are built
 * with libc's timegm(), not with the library's calendar.
 */
#include "check.h"
#include "sluice.h"
#include "stores.h"

#include <string.h>
#include <time.h>

#define S INT64_C(1000000)

/* The UTC instant y-m-d hh:mm:ss, in microseconds (libc's calendar). */
static int64_t at(int y, int m, int d, int hh, int mm, int ss)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = m - 1;
	tm.tm_mday = d;
	tm.tm_hour = hh;
	tm.tm_min = mm;
	tm.tm_sec = ss;
	return (int64_t)timegm(&tm) * S;
}

static sluice_limit_t quota(uint64_t n, uint8_t per, uint8_t align,
			    const char *zone)
{
	sluice_limit_t l;
	uint16_t id = 0;
	char err[200];

	if (zone && sluice_zone_load(zone, &id, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	if (sluice_quota_init(&l, n, per, align, id, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	return l;
}

/* One take on a state, committing it. */
static int take(const sluice_limit_t *l, sluice_state_t *s, int64_t now,
		uint64_t cost, sluice_decision_t *d)
{
	sluice_state_t next;

	sluice_eval(l, *s, now, cost, &next, d);
	*s = next;
	return d->allowed;
}

/* The "done when": refused at 23:59:59 UTC, allowed at 00:00:00
 * with remaining 2, pure and on the memory store. */
static void test_day_quota_resets_at_midnight(void)
{
	sluice_limit_t q =
		quota(3, SLUICE_PER_DAY, SLUICE_ALIGN_CALENDAR, NULL);
	sluice_memstore_t *m = open_memstore(64);
	sluice_decision_t d;
	sluice_state_t s = 0;
	int i;

	CHECK(m != NULL);
	for (i = 0; i < 3; i++) {
		CHECK(take(&q, &s, at(2026, 12, 5, 9, 0, i), 1, &d));
		CHECK(d.remaining == (uint64_t)(2 - i));
		CHECK(d.reset_after_us == (uint64_t)(at(2026, 12, 6, 0, 0, 0) -
						     at(2026, 12, 5, 9, 0, i)));
		CHECK(sluice_memstore_take(m, "k", 1, &q, 1, 1,
					   at(2026, 12, 5, 9, 0, i), NULL,
					   &d) == 1);
	}
	CHECK(!take(&q, &s, at(2026, 12, 5, 23, 59, 59), 1, &d));
	CHECK(d.remaining == 0 && !d.never && d.retry_after_us == (uint64_t)S);
	CHECK(sluice_memstore_take(m, "k", 1, &q, 1, 1,
				   at(2026, 12, 5, 23, 59, 59), NULL, &d) == 0);
	CHECK(d.retry_after_us == (uint64_t)S);
	/* The last microsecond of the day is still the day. */
	CHECK(!take(&q, &s, at(2026, 12, 6, 0, 0, 0) - 1, 1, &d));
	CHECK(d.retry_after_us == 1);
	CHECK(take(&q, &s, at(2026, 12, 6, 0, 0, 0), 1, &d));
	CHECK(d.remaining == 2);
	CHECK(sluice_memstore_take(m, "k", 1, &q, 1, 1,
				   at(2026, 12, 6, 0, 0, 0), NULL, &d) == 1);
	CHECK(d.remaining == 2 && d.limit == 3);
	CHECK(d.reset_after_us == (uint64_t)(86400 * S));
	sluice_memstore_free(m);
}

/* The state encoding: end_s * 10^9 + used, expiring just after the end. */
static void test_state_encoding_and_expiry(void)
{
	sluice_limit_t q =
		quota(10, SLUICE_PER_MONTH, SLUICE_ALIGN_CALENDAR, NULL);
	int64_t now = at(2024, 2, 10, 12, 0, 0), end, start;
	sluice_decision_t d;
	sluice_state_t s = 0;

	CHECK(take(&q, &s, now, 7, &d));
	CHECK(s == at(2024, 3, 1, 0, 0, 0) / S * INT64_C(1000000000) + 7);
	CHECK(sluice_quota_used(s, now, &end) == 7 &&
	      end == at(2024, 3, 1, 0, 0, 0));
	CHECK(sluice_quota_used(s, end, &end) == 0 && end == 0);
	CHECK(sluice_quota_window(&q, s, now, &start) ==
	      at(2024, 3, 1, 0, 0, 0));
	CHECK(start == at(2024, 2, 1, 0, 0, 0));
	CHECK(sluice_state_expiry_us(s) == at(2024, 3, 1, 0, 0, 0) + 1);
	CHECK(sluice_state_expiry_us(sluice_quota_state(at(2024, 3, 1, 0, 0, 0),
							SLUICE_QUOTA_MAX)) ==
	      at(2024, 3, 1, 0, 0, 0) + 1000000);
	CHECK(sluice_quota_state(at(2024, 3, 1, 0, 0, 0), 0) == 0);
	CHECK(sluice_quota_state(at(2024, 3, 1, 0, 0, 0),
				 SLUICE_QUOTA_MAX + 5) ==
	      sluice_quota_state(at(2024, 3, 1, 0, 0, 0), SLUICE_QUOTA_MAX));
	/* A token bucket has no window. */
	{
		sluice_limit_t b = lim(5, "1/s");

		CHECK(sluice_quota_window(&b, 0, now, &start) == 0 &&
		      start == 0);
		CHECK(!sluice_limit_is_quota(&b) && sluice_limit_is_quota(&q));
	}
}

/* Months of 28, 29, 30 and 31 days, leap years by the Gregorian rule
 * (2000 and 2024 leap, 2100 not), and the year's end. */
static void test_months_and_leap_years(void)
{
	static const int years[] = {1999, 2000, 2023, 2024, 2100};
	sluice_limit_t mo = quota(1, SLUICE_PER_MONTH, 0, NULL);
	sluice_limit_t yr = quota(1, SLUICE_PER_YEAR, 0, NULL);
	sluice_limit_t dy = quota(1, SLUICE_PER_DAY, 0, NULL);
	int64_t start, end;
	size_t i;
	int m;

	for (i = 0; i < sizeof(years) / sizeof(years[0]); i++) {
		int y = years[i];
		int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
		const int days[] = {31, 28 + leap, 31, 30, 31, 30,
				    31, 31,	   30, 31, 30, 31};

		for (m = 1; m <= 12; m++) {
			int64_t mid = at(y, m, 15, 13, 0, 0);

			end = sluice_quota_calendar(&mo, mid, &start);
			CHECK(start == at(y, m, 1, 0, 0, 0));
			CHECK(end - start == days[m - 1] * 86400 * S);
			/* The last second of the month is in it. */
			CHECK(sluice_quota_calendar(&mo, end - 1, NULL) == end);
			CHECK(sluice_quota_calendar(&mo, end, NULL) != end);
		}
		end = sluice_quota_calendar(&yr, at(y, 12, 31, 23, 59, 59),
					    &start);
		CHECK(start == at(y, 1, 1, 0, 0, 0) &&
		      end == at(y + 1, 1, 1, 0, 0, 0));
		CHECK(end - start == (365 + leap) * 86400 * S);
	}
	/* February 29th is a day of its own. */
	end = sluice_quota_calendar(&dy, at(2024, 2, 29, 23, 0, 0), &start);
	CHECK(start == at(2024, 2, 29, 0, 0, 0) &&
	      end == at(2024, 3, 1, 0, 0, 0));
	/* A count spent on Dec 31 is gone on Jan 1. */
	{
		sluice_state_t s = 0;
		sluice_decision_t d;

		CHECK(take(&yr, &s, at(2024, 12, 31, 23, 59, 59), 1, &d));
		CHECK(!take(&yr, &s, at(2024, 12, 31, 23, 59, 59), 1, &d));
		CHECK(d.retry_after_us == (uint64_t)S);
		CHECK(take(&yr, &s, at(2025, 1, 1, 0, 0, 0), 1, &d));
	}
}

/* ISO 8601 weeks: Monday 00:00 to Monday 00:00, across year ends, in
 * years of 53 weeks (2020, 2026), for every day from 1999 to 2031. */
static void test_iso_weeks(void)
{
	sluice_limit_t wk = quota(1, SLUICE_PER_WEEK, 0, NULL);
	const int64_t monday = at(2000, 1, 3, 0, 0, 0); /* a Monday */
	int64_t start, end, t;

	/* 2020's week 53: Mon Dec 28 2020 .. Mon Jan 4 2021. */
	end = sluice_quota_calendar(&wk, at(2021, 1, 3, 23, 59, 59), &start);
	CHECK(start == at(2020, 12, 28, 0, 0, 0) &&
	      end == at(2021, 1, 4, 0, 0, 0));
	/* 2026's week 53 ends on Monday Jan 4 2027. */
	end = sluice_quota_calendar(&wk, at(2026, 12, 31, 12, 0, 0), &start);
	CHECK(start == at(2026, 12, 28, 0, 0, 0) &&
	      end == at(2027, 1, 4, 0, 0, 0));
	/* 2025-12-31 (a Wednesday) is in 2026's week 1. */
	end = sluice_quota_calendar(&wk, at(2025, 12, 31, 0, 0, 0), &start);
	CHECK(start == at(2025, 12, 29, 0, 0, 0));
	for (t = at(1999, 1, 1, 7, 0, 0); t < at(2031, 1, 1, 0, 0, 0);
	     t += 86400 * S) {
		end = sluice_quota_calendar(&wk, t, &start);
		CHECK(start <= t && t < end && end - start == 7 * 86400 * S);
		CHECK((start - monday) % (7 * 86400 * S) == 0);
	}
}

/* First-use windows: open at the first request's second, last one unit;
 * a month from the 31st ends on the last day of a shorter month, a year
 * from Feb 29 on Feb 28. */
static void test_first_use_windows(void)
{
	sluice_limit_t mo =
		quota(2, SLUICE_PER_MONTH, SLUICE_ALIGN_FIRST_USE, NULL);
	sluice_limit_t yr =
		quota(2, SLUICE_PER_YEAR, SLUICE_ALIGN_FIRST_USE, NULL);
	sluice_limit_t mi = quota(2, SLUICE_PER_MINUTE, SLUICE_ALIGN_FIRST_USE,
				  "Europe/Berlin");
	sluice_state_t s = 0;
	sluice_decision_t d;
	int64_t start;

	/* Jan 31 10:00:00.5 -> Feb 28 10:00:00 (Feb 29 in 2024). */
	CHECK(take(&mo, &s, at(2023, 1, 31, 10, 0, 0) + S / 2, 1, &d));
	CHECK(sluice_quota_used(s, at(2023, 1, 31, 10, 0, 1), NULL) == 1);
	CHECK(sluice_quota_window(&mo, s, at(2023, 2, 1, 0, 0, 0), NULL) ==
	      at(2023, 2, 28, 10, 0, 0));
	CHECK(d.reset_after_us ==
	      (uint64_t)(at(2023, 2, 28, 10, 0, 0) - at(2023, 1, 31, 10, 0, 0) -
			 S / 2));
	CHECK(take(&mo, &s, at(2023, 2, 28, 9, 59, 59), 1, &d));
	CHECK(!take(&mo, &s, at(2023, 2, 28, 9, 59, 59), 1, &d));
	CHECK(d.retry_after_us == (uint64_t)S);
	/* The next window opens at the next request, not at the end. */
	CHECK(take(&mo, &s, at(2023, 3, 5, 8, 0, 0), 1, &d));
	CHECK(sluice_quota_window(&mo, s, at(2023, 3, 5, 8, 0, 0), &start) ==
	      at(2023, 4, 5, 8, 0, 0));
	CHECK(start == at(2023, 3, 5, 8, 0, 0));
	s = 0;
	CHECK(take(&mo, &s, at(2024, 1, 31, 10, 0, 0), 1, &d));
	CHECK(sluice_quota_used(s, 0, NULL) == 1);
	CHECK(sluice_quota_window(&mo, s, 0, NULL) ==
	      at(2024, 2, 29, 10, 0, 0));
	s = 0;
	CHECK(take(&mo, &s, at(2024, 3, 31, 23, 0, 0), 1, &d));
	CHECK(sluice_quota_window(&mo, s, at(2024, 4, 1, 0, 0, 0), NULL) ==
	      at(2024, 4, 30, 23, 0, 0));
	s = 0;
	CHECK(take(&yr, &s, at(2024, 2, 29, 6, 0, 0), 1, &d));
	CHECK(sluice_quota_window(&yr, s, at(2024, 3, 1, 0, 0, 0), NULL) ==
	      at(2025, 2, 28, 6, 0, 0));
	/* First use ignores the zone (counted in UTC, id of UTC). */
	CHECK(mi.window.zone == 0);
	s = 0;
	CHECK(take(&mi, &s, at(2024, 2, 29, 6, 0, 30) + 7, 1, &d));
	CHECK(sluice_quota_window(&mi, s, at(2024, 2, 29, 6, 0, 31), &start) ==
	      at(2024, 2, 29, 6, 1, 30));
	CHECK(start == at(2024, 2, 29, 6, 0, 30));
}

/* A clock that steps back never grants: a count keeps its window while
 * that lies ahead of now, whatever the verb. */
static void test_clock_stepping_back_never_grants(void)
{
	sluice_limit_t q = quota(2, SLUICE_PER_DAY, 0, NULL);
	sluice_limit_t h = quota(5, SLUICE_PER_HOUR, 0, NULL);
	const int64_t t = at(2026, 3, 10, 0, 0, 5);
	sluice_state_t s = 0, s2;
	sluice_decision_t d;
	int64_t back;

	CHECK(take(&q, &s, t, 2, &d));
	/* Back across midnight, then a whole day, then a year. */
	for (back = 10 * S; back <= 400 * 86400 * S; back *= 7) {
		s2 = s;
		CHECK(!take(&q, &s2, t - back, 1, &d));
		CHECK(s2 == s && d.remaining == 0);
		CHECK(d.retry_after_us ==
		      (uint64_t)(at(2026, 3, 11, 0, 0, 0) - (t - back)));
		/* Refund, penalize, block and set count in that window too. */
		CHECK(sluice_quota_used(sluice_refund(&q, s, t - back, 1),
					t - back, NULL) == 1);
		CHECK(sluice_quota_used(sluice_penalize(&q, s, t - back, 1),
					t - back, NULL) == 3);
		CHECK(sluice_block(&q, s, t - back, 5) == s);
	}
	/* An hour quota: drained at 10:30, the clock back to 09:59. */
	s = 0;
	CHECK(take(&h, &s, at(2026, 3, 10, 10, 30, 0), 5, &d));
	CHECK(!take(&h, &s, at(2026, 3, 10, 9, 59, 0), 1, &d));
	CHECK(!take(&h, &s, at(2026, 3, 10, 10, 59, 59), 1, &d));
	CHECK(take(&h, &s, at(2026, 3, 10, 11, 0, 0), 1, &d));
}

/* Buckets and quotas in one request, all or nothing: a refused request
 * charges neither, pure and on the memory store. */
static void test_mixed_bucket_and_quota_all_or_nothing(void)
{
	sluice_limit_t ls[2];
	sluice_state_t st[2] = {0, 0}, next[2];
	sluice_decision_t ds[2], sum;
	sluice_memstore_t *m = open_memstore(64);
	int64_t t = at(2026, 6, 1, 12, 0, 0);
	int i;

	CHECK(m != NULL);
	ls[0] = lim(10, "10/s");
	ls[1] = quota(3, SLUICE_PER_DAY, 0, NULL);
	for (i = 0; i < 3; i++) {
		CHECK(sluice_eval_all(ls, st, 2, t, 1, next, ds, &sum));
		st[0] = next[0];
		st[1] = next[1];
		CHECK(sluice_memstore_take(m, "k", 1, ls, 2, 1, t, NULL,
					   &sum) == 1);
	}
	/* The quota refuses: the bucket is not charged either. */
	CHECK(!sluice_eval_all(ls, st, 2, t, 1, next, ds, &sum));
	CHECK(next[0] == st[0] && next[1] == st[1]);
	CHECK(sum.which == 1 &&
	      sum.retry_after_us == (uint64_t)(at(2026, 6, 2, 0, 0, 0) - t));
	CHECK(ds[0].remaining == 7);
	CHECK(sluice_memstore_take(m, "k", 1, ls, 2, 1, t, ds, &sum) == 0);
	CHECK(sluice_memstore_take(m, "k", 1, &ls[0], 1, 0, t, NULL, &sum) ==
	      1);
	CHECK(sum.remaining == 7);
	/* Next day: the bucket empty (10 at once), the quota fresh; the
	 * bucket refuses and the quota keeps its 3. */
	t = at(2026, 6, 2, 0, 0, 1);
	CHECK(sluice_memstore_take(m, "k", 1, &ls[0], 1, 10, t, NULL, &sum) ==
	      1);
	CHECK(sluice_memstore_take(m, "k", 1, ls, 2, 1, t, ds, &sum) == 0);
	CHECK(sum.which == 0);
	CHECK(sluice_memstore_peek(m, "k", 1, &ls[1], 1, 0, t, NULL, &sum) ==
	      1);
	CHECK(sum.remaining == 3);
	CHECK(sluice_memstore_peek(m, "k", 1, &ls[1], 1, 3, t, NULL, &sum) ==
	      1);
	CHECK(sluice_memstore_peek(m, "k", 1, &ls[1], 1, 4, t, NULL, &sum) ==
	      0);
	CHECK(sum.never);
	sluice_memstore_free(m);
}

/* A cost larger than the quota never passes, in any window, by any verb
 * that checks. */
static void test_cost_above_quota_never(void)
{
	sluice_limit_t q = quota(3, SLUICE_PER_HOUR, 0, NULL);
	sluice_state_t s = 0, next;
	sluice_decision_t d;
	uint64_t wait;

	CHECK(!take(&q, &s, at(2026, 1, 1, 0, 0, 0), 4, &d));
	CHECK(d.never && d.retry_after_us == UINT64_MAX && s == 0);
	CHECK(!take(&q, &s, at(2026, 1, 1, 0, 0, 0), UINT64_MAX, &d));
	CHECK(d.never && s == 0);
	CHECK(sluice_reserve_all(&q, &s, 1, at(2026, 1, 1, 0, 0, 0), 4,
				 UINT64_MAX, &next, &d, &wait) == 0);
	CHECK(next == 0 && wait == UINT64_MAX && d.never &&
	      d.retry_after_us == UINT64_MAX);
}

/* Refund, penalize, block and set on a quota's count. */
static void test_refund_penalize_block_set(void)
{
	sluice_limit_t q = quota(5, SLUICE_PER_DAY, 0, NULL);
	const int64_t t = at(2026, 2, 1, 10, 0, 0);
	const int64_t end = at(2026, 2, 2, 0, 0, 0);
	sluice_state_t s = 0, r;
	sluice_decision_t d;

	CHECK(take(&q, &s, t, 3, &d));
	r = sluice_refund(&q, s, t, 2);
	CHECK(sluice_quota_used(r, t, NULL) == 1);
	CHECK(sluice_refund(&q, s, t, 99) == 0);
	CHECK(sluice_refund(&q, s, end, 1) == 0); /* the window is over */
	CHECK(sluice_refund(&q, 0, t, 1) == 0);
	/* Penalize: a debt within the window only. */
	r = sluice_penalize(&q, s, t, 10);
	CHECK(sluice_quota_used(r, t, NULL) == 13);
	CHECK(!take(&q, &r, t + S, 0, &d) && d.remaining == 0);
	CHECK(take(&q, &r, end, 5, &d));
	CHECK(sluice_quota_used(sluice_penalize(&q, s, t, UINT64_MAX), t,
				NULL) == SLUICE_QUOTA_MAX);
	CHECK(sluice_penalize(&q, s, t, 0) == s);
	/* Block: the window is spent; the next one starts unused, however
	 * long the block. */
	r = sluice_block(&q, s, t, 1000ULL * 86400 * 30);
	CHECK(!take(&q, &r, end - 1, 1, &d) && d.retry_after_us == 1);
	CHECK(take(&q, &r, end, 5, &d));
	CHECK(sluice_block(&q, s, t, 0) == s);
	r = sluice_penalize(&q, s, t, 4); /* 7 used: block keeps it */
	CHECK(sluice_quota_used(sluice_block(&q, r, t, 1), t, NULL) == 7);
	/* Set: the remaining count of the window holding now. */
	r = sluice_set_remaining(&q, t, 1);
	CHECK(sluice_quota_used(r, t, NULL) == 4);
	CHECK(sluice_quota_window(&q, r, t, NULL) == end);
	CHECK(sluice_set_remaining(&q, t, 5) == 0);
	CHECK(sluice_set_remaining(&q, t, 500) == 0);
	r = sluice_set_remaining(&q, t, 0);
	CHECK(!take(&q, &r, t, 1, &d) && take(&q, &r, end, 1, &d));
}

/* Reservations: a quota is reserved only when it passes now; a turn
 * (set by a bucket) at or past the quota's window end is refused. */
static void test_reserve_on_quotas(void)
{
	sluice_limit_t ls[2];
	sluice_state_t st[2] = {0, 0}, next[2];
	sluice_decision_t sum;
	const int64_t t = at(2026, 7, 1, 23, 59, 0); /* a minute to go */
	uint64_t wait;

	ls[0] = quota(2, SLUICE_PER_DAY, 0, NULL);
	ls[1] = lim(1, "2/min"); /* a turn each 30 s */
	CHECK(sluice_reserve_all(ls, st, 1, t, 1, 0, next, &sum, &wait) == 1);
	CHECK(wait == 0 && sluice_quota_used(next[0], t, NULL) == 1);
	CHECK(sum.remaining == 1 && sum.allowed);
	st[0] = next[0];
	CHECK(sluice_reserve_all(ls, st, 1, t, 1, 0, next, &sum, &wait) == 1);
	st[0] = next[0];
	/* Spent: refused whatever max_wait, nothing charged, the wait
	 * until the window's end. */
	CHECK(sluice_reserve_all(ls, st, 1, t, 1, UINT64_MAX, next, &sum,
				 &wait) == 0);
	CHECK(next[0] == st[0] && wait == (uint64_t)(60 * S));
	CHECK(!sum.allowed && sum.retry_after_us == (uint64_t)(60 * S));
	/* With a bucket: turns now and 30 s on are within the window ->
	 * reserved, the quota charged in it. */
	ls[0] = quota(3, SLUICE_PER_DAY, 0, NULL);
	st[0] = 0;
	CHECK(sluice_reserve_all(ls, st, 2, t, 1, UINT64_MAX, next, &sum,
				 &wait) == 1);
	CHECK(wait == 0);
	st[0] = next[0];
	st[1] = next[1];
	CHECK(sluice_reserve_all(ls, st, 2, t, 1, UINT64_MAX, next, &sum,
				 &wait) == 1);
	CHECK(wait == (uint64_t)(30 * S) &&
	      sluice_quota_used(next[0], t, NULL) == 2);
	st[0] = next[0];
	st[1] = next[1];
	/* The next turn is a minute on: the window's end, tomorrow's
	 * window.  Refused, charging neither, the quota with room. */
	CHECK(sluice_reserve_all(ls, st, 2, t, 1, UINT64_MAX, next, &sum,
				 &wait) == 0);
	CHECK(next[0] == st[0] && next[1] == st[1]);
	CHECK(wait == (uint64_t)(60 * S) && !sum.allowed);
	CHECK(sluice_reserve_all(ls, st, 2, t + 10 * S, 1, UINT64_MAX, next,
				 &sum, &wait) == 0);
	/* After midnight the turn and the window agree again. */
	CHECK(sluice_reserve_all(ls, st, 2, t + 60 * S, 1, UINT64_MAX, next,
				 &sum, &wait) == 1);
	CHECK(wait == 0 && sluice_quota_used(next[0], t + 60 * S, NULL) == 1);
}

/* Carry across a change of limit: what was used stays used. */
static void test_carry_between_buckets_and_quotas(void)
{
	sluice_limit_t b = lim(10, "10/h"); /* a token each 6 min */
	sluice_limit_t q = quota(5, SLUICE_PER_DAY, 0, NULL);
	sluice_limit_t q2 = quota(3, SLUICE_PER_MONTH, 0, NULL);
	const int64_t t = at(2026, 4, 15, 8, 0, 0);
	sluice_state_t s = 0, c;
	sluice_decision_t d;

	/* Bucket -> quota: 4 tokens used (one partly refilled counts). */
	CHECK(take(&b, &s, t, 4, &d));
	c = sluice_carry(&b, s, &q, t + 60 * S);
	CHECK(sluice_quota_used(c, t, NULL) == 4);
	CHECK(sluice_quota_window(&q, c, t, NULL) == at(2026, 4, 16, 0, 0, 0));
	/* A drained bucket becomes a spent quota, not more. */
	CHECK(take(&b, &s, t, 6, &d));
	c = sluice_carry(&b, s, &q, t);
	CHECK(sluice_quota_used(c, t, NULL) == 5);
	CHECK(sluice_carry(&b, 0, &q, t) == 0);
	/* Quota -> quota (lowered), quota -> bucket. */
	s = 0;
	CHECK(take(&q, &s, t, 4, &d));
	c = sluice_carry(&q, s, &q2, t);
	CHECK(sluice_quota_used(c, t, NULL) == 3);
	CHECK(sluice_quota_window(&q2, c, t, NULL) == at(2026, 5, 1, 0, 0, 0));
	c = sluice_carry(&q, s, &b, t);
	CHECK(take(&b, &c, t, 0, &d) && d.remaining == 6);
	/* A quota whose window is over carries nothing. */
	CHECK(sluice_carry(&q, s, &b, at(2026, 4, 16, 0, 0, 0)) == 0);
}

/* Limit ids and sameness. */
static void test_limit_ids(void)
{
	sluice_limit_t a = quota(10000, SLUICE_PER_MONTH, 0, NULL);
	sluice_limit_t b = quota(3, SLUICE_PER_DAY, 0, "Europe/Berlin");
	sluice_limit_t c =
		quota(100, SLUICE_PER_HOUR, SLUICE_ALIGN_FIRST_USE, NULL);
	sluice_limit_t d = quota(3, SLUICE_PER_DAY, 0, "Asia/Kolkata");
	sluice_limit_t e = quota(3, SLUICE_PER_DAY, 0, "Etc/UTC");
	sluice_limit_t bucket;
	sluice_rate_t one = {1, 1};
	char id[SLUICE_LIMIT_ID_MAX];

	CHECK(sluice_limit_id(&a, id) == 11 && strcmp(id, "10000@month") == 0);
	CHECK(sluice_limit_id(&b, id) == strlen("3@day:Europe/Berlin") &&
	      strcmp(id, "3@day:Europe/Berlin") == 0);
	CHECK(strcmp((sluice_limit_id(&c, id), id), "100@hour:first_use") == 0);
	CHECK(strcmp((sluice_limit_id(&e, id), id), "3@day") == 0);
	/* The bucket a quota is built as (3 tokens, one a microsecond) is
	 * another limit. */
	CHECK(sluice_limit_init(&bucket, 3, &one, NULL, 0) == 0);
	CHECK(strchr((sluice_limit_id(&bucket, id), id), '/') != NULL);
	CHECK(!sluice_limit_same(&bucket, &e) &&
	      !sluice_limit_same(&e, &bucket));
	CHECK(!sluice_limit_same(&b, &d) && sluice_limit_same(&b, &b));
	CHECK(!sluice_limit_same(&b, &e));
	CHECK(sluice_limit_valid(&a) && sluice_limit_valid(&b) &&
	      sluice_limit_valid(&c));
}

/* Bad input: clear errors, never a quota that is not valid. */
static void test_bad_input(void)
{
	sluice_limit_t l, bad;
	char err[200];
	uint8_t per = 99;
	const char *units[] = {"second", "seconds", "minute", "minutes",
			       "hour",	 "hours",   "day",    "days",
			       "week",	 "weeks",   "month",  "months",
			       "year",	 "years"};
	size_t i;

	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		CHECK(sluice_per_parse(units[i], &per, NULL, 0) == 0);
		CHECK(per == i / 2 + 1);
		CHECK(strncmp(sluice_per_name(per), units[i],
			      strlen(sluice_per_name(per))) == 0);
	}
	CHECK(strcmp(sluice_per_name(0), "") == 0 &&
	      strcmp(sluice_per_name(8), "") == 0);
	per = 99;
	CHECK(sluice_per_parse("fortnight", &per, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	CHECK(per == 99 && strstr(err, "month") && strstr(err, "fortnight"));
	CHECK(sluice_per_parse("dayss", &per, NULL, 0) == SLUICE_EINVAL);
	CHECK(sluice_per_parse("Day", &per, NULL, 0) == SLUICE_EINVAL);
	CHECK(sluice_per_parse("", &per, NULL, 0) == SLUICE_EINVAL);
	CHECK(sluice_per_parse(NULL, &per, err, sizeof(err)) == SLUICE_EINVAL);
	CHECK(sluice_quota_init(&l, 0, SLUICE_PER_DAY, 0, 0, err,
				sizeof(err)) == SLUICE_ERANGE);
	CHECK(sluice_quota_init(&l, SLUICE_QUOTA_MAX + 1, SLUICE_PER_DAY, 0, 0,
				err, sizeof(err)) == SLUICE_ERANGE);
	CHECK(strstr(err, "999999999") != NULL);
	CHECK(sluice_quota_init(&l, SLUICE_QUOTA_MAX, SLUICE_PER_DAY, 0, 0,
				NULL, 0) == 0);
	CHECK(sluice_quota_init(&l, 5, 0, 0, 0, NULL, 0) == SLUICE_EINVAL);
	CHECK(sluice_quota_init(&l, 5, 8, 0, 0, NULL, 0) == SLUICE_EINVAL);
	CHECK(sluice_quota_init(&l, 5, SLUICE_PER_DAY, 2, 0, NULL, 0) ==
	      SLUICE_EINVAL);
	CHECK(sluice_quota_init(&l, 5, SLUICE_PER_DAY, 0, 1023, err,
				sizeof(err)) == SLUICE_EINVAL);
	CHECK(strstr(err, "1023") != NULL);
	/* Hand-built quotas the stores must refuse. */
	l = quota(5, SLUICE_PER_DAY, 0, NULL);
	bad = l;
	bad.tau = 6;
	CHECK(!sluice_limit_valid(&bad));
	bad = l;
	bad.window.reserved = 1;
	CHECK(!sluice_limit_valid(&bad));
	bad = l;
	bad.window.zone = 1023;
	CHECK(!sluice_limit_valid(&bad));
	bad = l;
	bad.window.per = 9;
	CHECK(!sluice_limit_valid(&bad));
	bad = l;
	bad.window.align = SLUICE_ALIGN_FIRST_USE;
	bad.window.zone = l.window.zone;
	CHECK(sluice_limit_valid(&bad));
	CHECK(sluice_zone_load("Europe/Berlin", &bad.window.zone, NULL, 0) ==
	      0);
	CHECK(!sluice_limit_valid(&bad)); /* first use takes UTC */
	bad = l;
	bad.rate.interval = 2;
	bad.tau = 10;
	CHECK(!sluice_limit_valid(&bad));
	{
		sluice_memstore_t *m = open_memstore(16);
		sluice_decision_t d;

		CHECK(m != NULL);
		CHECK(sluice_memstore_take(m, "k", 1, &bad, 1, 1, 0, NULL,
					   &d) == SLUICE_EINVAL);
		sluice_memstore_free(m);
	}
}

/* A day in a zone with summer time: New York's 2024-03-10 lasts 23
 * hours, 2024-11-03 25; Berlin's quota resets at its midnight. */
static void test_day_in_a_zone(void)
{
	sluice_limit_t ny = quota(1, SLUICE_PER_DAY, 0, "America/New_York");
	sluice_limit_t be = quota(2, SLUICE_PER_DAY, 0, "Europe/Berlin");
	sluice_state_t s = 0;
	sluice_decision_t d;
	int64_t start, end;

	end = sluice_quota_calendar(&ny, at(2024, 3, 10, 12, 0, 0), &start);
	CHECK(start == at(2024, 3, 10, 5, 0, 0) &&
	      end == at(2024, 3, 11, 4, 0, 0));
	end = sluice_quota_calendar(&ny, at(2024, 11, 3, 12, 0, 0), &start);
	CHECK(start == at(2024, 11, 3, 4, 0, 0) &&
	      end == at(2024, 11, 4, 5, 0, 0));
	/* Berlin in winter: midnight is 23:00 UTC. */
	CHECK(take(&be, &s, at(2026, 1, 5, 22, 0, 0), 2, &d));
	CHECK(!take(&be, &s, at(2026, 1, 5, 22, 59, 59), 1, &d));
	CHECK(d.retry_after_us == (uint64_t)S);
	CHECK(take(&be, &s, at(2026, 1, 5, 23, 0, 0), 1, &d));
	CHECK(d.remaining == 1);
}

int main(void)
{
	RUN(test_day_quota_resets_at_midnight);
	RUN(test_state_encoding_and_expiry);
	RUN(test_months_and_leap_years);
	RUN(test_iso_weeks);
	RUN(test_first_use_windows);
	RUN(test_clock_stepping_back_never_grants);
	RUN(test_mixed_bucket_and_quota_all_or_nothing);
	RUN(test_cost_above_quota_never);
	RUN(test_refund_penalize_block_set);
	RUN(test_reserve_on_quotas);
	RUN(test_carry_between_buckets_and_quotas);
	RUN(test_limit_ids);
	RUN(test_bad_input);
	RUN(test_day_in_a_zone);
	TESTS_DONE();
}
