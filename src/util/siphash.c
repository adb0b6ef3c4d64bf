/*
 * siphash.c -- SipHash-1-3 (Aumasson & Bernstein), one compression round
 * and three finalisation rounds: the variant hash tables use for speed, in
 * its 128-bit output form.
 */
#include "util/siphash.h"

#include <string.h>
#include <sys/random.h>
#include <time.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND                                                               \
	do {                                                                   \
		v0 += v1;                                                      \
		v1 = ROTL(v1, 13);                                             \
		v1 ^= v0;                                                      \
		v0 = ROTL(v0, 32);                                             \
		v2 += v3;                                                      \
		v3 = ROTL(v3, 16);                                             \
		v3 ^= v2;                                                      \
		v0 += v3;                                                      \
		v3 = ROTL(v3, 21);                                             \
		v3 ^= v0;                                                      \
		v2 += v1;                                                      \
		v1 = ROTL(v1, 17);                                             \
		v1 ^= v2;                                                      \
		v2 = ROTL(v2, 32);                                             \
	} while (0)

static uint64_t load64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8); /* little-endian hosts only (x86_64, aarch64) */
	return v;
}

void sluice_siphash13_128(const uint8_t key[16], const void *data, size_t len,
			  uint64_t out[2])
{
	const uint8_t *in = data;
	uint64_t k0 = load64(key), k1 = load64(key + 8);
	uint64_t v0 = 0x736f6d6570736575ULL ^ k0;
	uint64_t v1 = 0x646f72616e646f6dULL ^ k1 ^ 0xee; /* 128-bit output */
	uint64_t v2 = 0x6c7967656e657261ULL ^ k0;
	uint64_t v3 = 0x7465646279746573ULL ^ k1;
	uint64_t b = (uint64_t)len << 56, m;
	size_t i, tail = len & 7;

	for (i = 0; i + 8 <= len; i += 8) {
		m = load64(in + i);
		v3 ^= m;
		SIPROUND;
		v0 ^= m;
	}
	m = 0;
	if (tail)
		memcpy(&m, in + i, tail);
	b |= m;
	v3 ^= b;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xee;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	out[0] = v0 ^ v1 ^ v2 ^ v3;
	v1 ^= 0xdd;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	out[1] = v0 ^ v1 ^ v2 ^ v3;
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
