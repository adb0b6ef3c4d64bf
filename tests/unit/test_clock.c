/*
 * test_clock.c -- the library's clock reads no environment; the program's
 * test clock is a hook of its own (core/test_clock.h).
 */
#include "core/test_clock.h"
#include "check.h"
#include "sluice.h"

#include <stdlib.h>
#include <time.h>

#define HOUR_US (3600LL * 1000000)

static int64_t wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* An hour's offset in the environment does not move the library's clock
 * (the bound is ten minutes: no timing, only which hour it is). */
static void test_environment_ignored(void)
{
	int64_t d;

	CHECK(setenv("SLUICE_TEST_CLOCK_OFFSET_US", "3600000000", 1) == 0);
	d = sluice_now_us() - wall_us();
	CHECK(d < HOUR_US / 6 && d > -HOUR_US / 6);
	unsetenv("SLUICE_TEST_CLOCK_OFFSET_US");
}

/* The hook shifts it, and 0 puts it back. */
static void test_hook_shifts(void)
{
	int64_t d;

	sluice__set_test_clock_offset(HOUR_US);
	d = sluice_now_us() - wall_us();
	CHECK(d > HOUR_US - HOUR_US / 6 && d < HOUR_US + HOUR_US / 6);
	sluice__set_test_clock_offset(0);
	d = sluice_now_us() - wall_us();
	CHECK(d < HOUR_US / 6 && d > -HOUR_US / 6);
}

int main(void)
{
	RUN(test_environment_ignored);
	RUN(test_hook_shifts);
	TESTS_DONE();
}
