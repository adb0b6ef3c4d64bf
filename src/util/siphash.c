/*
 * siphash.c -- SipHash-1-3 (Aumasson & Bernstein), one compression round
 * and three finalisation rounds: the variant hash tables use for speed, in
 * its 128-bit output form.
 */
#include "util/siphash.h"
#include "util/platform.h"

#include <string.h>
#include <time.h>
#include <unistd.h>
#if SLUICE_LINUX || defined(__APPLE__)
#include <sys/random.h> /* getrandom(); macOS's getentropy() */
#endif

void sluice_siphash13_128(const uint8_t key[16], const void *data, size_t len,
			  uint64_t out[2])
{
	sluice_siphash13_128_in(key, data, len, out);
}

void sluice_random_bytes(void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t got = 0;

	while (got < len) {
#if SLUICE_LINUX
		ssize_t n = getrandom(p + got, len - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
#else
		/* getentropy() gives at most 256 bytes a call. */
		size_t n = len - got < 256 ? len - got : 256;
		if (getentropy(p + got, n) != 0)
			break;
		got += n;
#endif
	}
	if (got < len) {
		struct timespec ts;
		uint64_t x;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
		    (uint64_t)(uintptr_t)buf;
		for (; got < len; got++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			p[got] = (uint8_t)x;
		}
	}
}
