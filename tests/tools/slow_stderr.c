/*
 * slow_stderr.c -- an LD_PRELOAD shim for the integration tests: a write
 * to stderr holding the text SLOW_STDERR_MATCH waits SLOW_STDERR_MS
 * milliseconds (default 1000) before it happens.
 *
 * It stands for a busy machine that preempts a server between two of its
 * steps -- `sluice serve` bumps the reload counter, then logs the reload --
 * so that a test which reads the log too early fails every time instead
 * of once in a thousand runs (tests/integration/test_serve_reload.py).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

ssize_t write(int fd, const void *buf, size_t n);

ssize_t write(int fd, const void *buf, size_t n)
{
	static ssize_t (*real)(int, const void *, size_t);
	const char *match = getenv("SLOW_STDERR_MATCH");

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "write");
	if (fd == STDERR_FILENO && match && *match &&
	    memmem(buf, n, match, strlen(match))) {
		const char *ms = getenv("SLOW_STDERR_MS");
		long wait = ms ? atol(ms) : 1000;
		struct timespec ts = {wait / 1000, (wait % 1000) * 1000000L};

		while (nanosleep(&ts, &ts) != 0)
			;
	}
	return real(fd, buf, n);
}
