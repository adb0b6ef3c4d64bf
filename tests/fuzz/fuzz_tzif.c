/*
 * fuzz_tzif.c -- libFuzzer harness for the time zone files calendar
 * quotas read (src/core/zone.c): arbitrary bytes parsed as TZif (versions
 * 1 to 4, the POSIX TZ footer included); a file the parser accepts is then
 * asked for offsets and calendar windows at instants across the range a
 * decision's clock covers, every unit, so that footer rules of any shape
 * (southern summers, summer time all year, times of +-167 h) run through
 * the window arithmetic.  Nothing may read out of bounds, overflow or
 * loop unbounded, and an offset stays under 26 hours with its next
 * transition after the instant.
 */
#include "core/calendar.h"
#include "core/zone.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int64_t instants[] = {0,	       86399,	   951782400,
					   1320537600, 1711846800, 2147483647,
					   4102444800, 8600000000};
	sluice_zone_t z;
	char err[256];
	size_t i;
	uint8_t per;

	if (sluice_tzif_parse(data, size, &z, err, sizeof(err)) != 0)
		return 0;
	for (i = 0; i < sizeof(instants) / sizeof(instants[0]); i++) {
		int64_t next, start, end;
		int32_t off = sluice_zone_offset(&z, instants[i], &next);

		if (off <= -26 * 3600 || off >= 26 * 3600 ||
		    next <= instants[i])
			abort();
		for (per = SLUICE_PER_SECOND; per <= SLUICE_PER_YEAR; per++) {
			end = sluice_calendar_window(&z, per, instants[i],
						     &start);
			(void)end;
			(void)start;
		}
	}
	sluice_zone_release(&z);
	return 0;
}
