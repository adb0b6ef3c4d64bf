/*
 * clock.c -- the library's clock, sluice_now_us(), and its test offset.
 */
#include "core/test_clock.h"
#include "sluice.h"

#include <time.h>

/*
 * The test clock: `sluice serve`'s tests shift the program's clock
 * (SLUICE_TEST_CLOCK_OFFSET_US, read by the program at start, src/cli) to
 * show that decisions on the Redis store, which uses the server's clock,
 * do not depend on the instances' clocks.  The library itself reads no
 * environment.  Set before any thread reads the clock.
 */
static int64_t clock_offset_us;

void sluice__set_test_clock_offset(int64_t us)
{
	clock_offset_us = us;
}

int64_t sluice_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 +
	       clock_offset_us;
}
