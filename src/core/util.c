/*
 * util.c -- error strings and the clock.
 */
#include "sluice.h"

#include <pthread.h>
#include <stdlib.h>
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
 * Tests shift a process's clock by SLUICE_TEST_CLOCK_OFFSET_US
 * microseconds (read once) to show that decisions on the Redis store, which
 * uses the server's clock, do not depend on the instances' clocks.
 */
static int64_t clock_offset_us;
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

static void clock_init(void)
{
	const char *s = getenv("SLUICE_TEST_CLOCK_OFFSET_US");

	if (s)
		clock_offset_us = strtoll(s, NULL, 10);
}

int64_t sluice_now_us(void)
{
	struct timespec ts;

	pthread_once(&clock_once, clock_init);
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 +
	       clock_offset_us;
}
