/*
 * num.h -- integer helpers shared by the library, the service and the Redis
 * module (which is built from sources, without libsluice: CMakeLists.txt
 * adds src/util/num.c to it).
 */
#ifndef SLUICE_UTIL_NUM_H
#define SLUICE_UTIL_NUM_H

#include <stddef.h>
#include <stdint.h>

/* ceil(a / b) without overflow (b > 0).  Waits and times to refill are
 * always rounded up: rounding down would tell a client to come back
 * before it can pass. */
static inline uint64_t sluice_div_ceil(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

/* Writes v in decimal into out (at least 20 bytes, no NUL); returns the
 * length.  The hot paths format a few numbers per decision: no printf. */
size_t sluice_u64_dec(char *out, uint64_t v);

/* The greatest common divisor (Euclid); gcd(a, 0) is a. */
static inline uint64_t sluice_gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

#endif /* SLUICE_UTIL_NUM_H */
