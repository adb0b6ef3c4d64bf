/*
 * civil.c -- day numbers of the proleptic Gregorian calendar, after Howard
 * Hinnant's "chrono-Compatible Low-Level Date Algorithms"
 * (howardhinnant.github.io/date_algorithms.html): a year is shifted to
 * start on March 1, so that the leap day is the last day of the shifted
 * year, and the 400-year era (146097 days) makes every step an integer
 * division with no table and no loop.
 */
#include "core/civil.h"

int64_t sluice_days_from_civil(int64_t y, unsigned m, unsigned d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = sluice_floor_div(y, 400);
	yoe = y - era * 400;				       /* [0, 399] */
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* [0, 365] */
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;	       /* [0, 146096] */
	return era * 146097 + doe - 719468;
}

void sluice_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = sluice_floor_div(z, 146097);
	doe = z - era * 146097; /* [0, 146096] */
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) /
	      365;				       /* [0, 399] */
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100); /* [0, 365] */
	mp = (5 * doy + 2) / 153;		       /* [0, 11] */
	*d = (unsigned)(doy - (153 * mp + 2) / 5 + 1);
	*m = (unsigned)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

int sluice_civil_leap(int64_t y)
{
	return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

unsigned sluice_civil_month_days(int64_t y, unsigned m)
{
	static const unsigned char days[12] = {31, 28, 31, 30, 31, 30,
					       31, 31, 30, 31, 30, 31};

	if (m == 2)
		return 28u + (unsigned)sluice_civil_leap(y);
	return days[(m - 1) % 12];
}

unsigned sluice_civil_iso_weekday(int64_t z)
{
	/* 1970-01-01 was a Thursday (3 counting from Monday 0). */
	return (unsigned)sluice_floor_mod(z + 3, 7);
}
