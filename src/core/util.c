/*
 * util.c -- error strings and the clock.
 */
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

int64_t sluice_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
