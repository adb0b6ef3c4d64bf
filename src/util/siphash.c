/*
 * siphash.c -- SipHash-1-3 (Aumasson & Bernstein), one compression round
 * and three finalisation rounds: the variant hash tables use for speed, in
 * its 128-bit output form.
 */
#include "util/siphash.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>

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
		ssize_t n = getrandom(p + got, len - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
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
