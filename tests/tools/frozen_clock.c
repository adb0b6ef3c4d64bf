/*
 * frozen_clock.c -- an LD_PRELOAD shim for the Redis tests: the wall clock
 * (gettimeofday, time, clock_gettime of CLOCK_REALTIME and its coarse
 * form) stands still at FROZEN_CLOCK_US microseconds since the epoch; the
 * monotonic clocks, which the server's timers use, run as ever.
 *
 * A redis-server started with it gives the Lua script (TIME) and the
 * module (the server's cached clock) the same instant at every call, so
 * the same sequence of decisions on the script path and on the module
 * path must store the same bytes, not merely close ones
 * (tests/unit/test_redis_store_module.c).  Keys never expire meanwhile.
 *
 * FROZEN_CLOCK_FILE, when set, names a file holding the instant (its
 * decimal microseconds), read at every call: a test steps the server's
 * clock by rewriting it (tests/unit/test_redis_quota.c: a quota across
 * midnight).  It wins over FROZEN_CLOCK_US while it holds a number.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int gettimeofday(struct timeval *restrict tv, void *restrict tz);
int clock_gettime(clockid_t id, struct timespec *ts);
time_t time(time_t *out);

/* The frozen instant, or -1 when FROZEN_CLOCK_US is unset (the real
 * clock then). */
static long long frozen_us(void)
{
	const char *v = getenv("FROZEN_CLOCK_US"),
		   *f = getenv("FROZEN_CLOCK_FILE");

	if (f && *f) {
		char buf[32];
		int fd = open(f, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

		if (fd >= 0)
			close(fd);
		if (n > 0) {
			buf[n] = '\0';
			if (atoll(buf) > 0)
				return atoll(buf);
		}
	}
	return v && *v ? atoll(v) : -1;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
	static int (*real)(struct timeval *restrict, void *restrict);
	long long us = frozen_us();

	if (us < 0) {
		if (!real)
			*(void **)&real = dlsym(RTLD_NEXT, "gettimeofday");
		return real(tv, tz);
	}
	tv->tv_sec = (time_t)(us / 1000000);
	tv->tv_usec = (suseconds_t)(us % 1000000);
	return 0;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);
	long long us = frozen_us();

	if (us < 0 || (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE)) {
		if (!real)
			*(void **)&real = dlsym(RTLD_NEXT, "clock_gettime");
		return real(id, ts);
	}
	ts->tv_sec = (time_t)(us / 1000000);
	ts->tv_nsec = (long)(us % 1000000) * 1000;
	return 0;
}

time_t time(time_t *out)
{
	long long us = frozen_us();
	time_t t;

	if (us < 0) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		t = ts.tv_sec;
	} else {
		t = (time_t)(us / 1000000);
	}
	if (out)
		*out = t;
	return t;
}
