/*
 * shm_test.h -- what the shared-memory store's tests share: a limit, a
 * fresh file name under /dev/shm, a store opened or the error of opening
 * one, bytes written into a file at an offset, and a monotonic clock.
 */
#ifndef SLUICE_TESTS_SHM_TEST_H
#define SLUICE_TESTS_SHM_TEST_H

#include "check.h"
#include "sluice.h"
#include "store/shm.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* The store's time the tests start at (2025-11-30). */
#define T0 INT64_C(1764500000000000)

static inline sluice_limit_t limit(const char *cap, const char *rate)
{
	sluice_limit_t l;
	char err[256];

	if (sluice_limit_parse(&l, cap, rate, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	return l;
}

/* A fresh file name under /dev/shm for this test run. */
static inline const char *shm_path(const char *what)
{
	static char path[128];

	snprintf(path, sizeof(path), "/dev/shm/sluice-test-%d-%s", getpid(),
		 what);
	unlink(path);
	return path;
}

static inline sluice_shmstore_t *open_store(const char *path, size_t max_keys)
{
	sluice_shmstore_t *s = NULL;
	char err[256];

	if (sluice_shmstore_open(&s, path, max_keys, err, sizeof(err)) != 0)
		fprintf(stderr, "open: %s\n", err);
	return s;
}

static inline int64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int open_err(const char *path, size_t max_keys, char *err,
			   size_t errlen)
{
	sluice_shmstore_t *s = NULL;
	int rc = sluice_shmstore_open(&s, path, max_keys, err, errlen);

	if (rc == 0)
		sluice_shmstore_close(s);
	else if (s)
		rc = 99; /* a failed open must not hand out a store */
	return rc;
}

static inline int patch(const char *path, off_t at, const void *bytes, size_t n)
{
	int fd = open(path, O_WRONLY);
	int ok = fd >= 0 && pwrite(fd, bytes, n, at) == (ssize_t)n;

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

#endif /* SLUICE_TESTS_SHM_TEST_H */
