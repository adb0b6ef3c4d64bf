/*
 * util.c -- error strings and the clock.
 */
#include "core/test_clock.h"
#include "sluice.h"

#include <time.h>

const char *sluice_strerror(int err)
{
	switch (err) {
	case SLUICE_OK:
		return "success";
	case SLUICE_EINVAL:
		return "invalid argument";
	case SLUICE_ERANGE:
		return "value out of range";
	case SLUICE_ENOMEM:
		return "out of memory";
	case SLUICE_ESTORE:
		return "store failure";
	case SLUICE_ETIMEDOUT:
		return "store timed out";
	default:
		return "unknown error";
	}
}

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
