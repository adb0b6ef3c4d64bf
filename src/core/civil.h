/*
 * civil.h -- the proleptic Gregorian calendar as day numbers (civil.c):
 * days since 1970-01-01 from a date and back, exact for any int32 year.
 * The calendar windows of quotas (calendar.c) and the POSIX TZ rules of
 * time zones (zone.c) count in these.
 */
#ifndef SLUICE_CORE_CIVIL_H
#define SLUICE_CORE_CIVIL_H

#include <stdint.h>

/* Days from 1970-01-01 to y-m-d (m 1..12, d 1..31; d past the month's end
 * runs on into the next month). */
int64_t sluice_days_from_civil(int64_t y, unsigned m, unsigned d);

/* The date of day z (days since 1970-01-01). */
void sluice_civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d);

/* 1 in a leap year. */
int sluice_civil_leap(int64_t y);

/* The days of month m (1..12) of year y. */
unsigned sluice_civil_month_days(int64_t y, unsigned m);

/* The weekday of day z: 0 Monday .. 6 Sunday (ISO 8601). */
unsigned sluice_civil_iso_weekday(int64_t z);

/* Floor division and modulo (the result of mod is in [0, b)). */
static inline int64_t sluice_floor_div(int64_t a, int64_t b)
{
	int64_t q = a / b;

	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static inline int64_t sluice_floor_mod(int64_t a, int64_t b)
{
	return a - sluice_floor_div(a, b) * b;
}

#endif
