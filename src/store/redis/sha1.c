/*
 * sha1.c -- SHA-1 (FIPS 180-4), only to name the Lua script: EVALSHA needs
 * the script's SHA-1 before the first SCRIPT LOAD reply is in, so every
 * connection can pipeline decisions right behind its SCRIPT LOAD.
 */
#include "store/redis/redis_int.h"

#include <stdio.h>
#include <string.h>

static uint32_t rol(uint32_t x, int n)
{
	return (x << n) | (x >> (32 - n));
}

static void block(uint32_t h[5], const unsigned char *p)
{
	uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (; i < 80; i++)
		w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	for (i = 0; i < 80; i++) {
		uint32_t f, k, t;

		if (i < 20) {
			f = (b & c) | (~b & d);
			k = 0x5a827999;
		} else if (i < 40) {
			f = b ^ c ^ d;
			k = 0x6ed9eba1;
		} else if (i < 60) {
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdc;
		} else {
			f = b ^ c ^ d;
			k = 0xca62c1d6;
		}
		t = rol(a, 5) + f + e + k + w[i];
		e = d;
		d = c;
		c = rol(b, 30);
		b = a;
		a = t;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
}

void sluice_redis__sha1_hex(const void *data, size_t len, char out[41])
{
	uint32_t h[5] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476,
			 0xc3d2e1f0};
	const unsigned char *p = data;
	unsigned char tail[128];
	uint64_t bits = (uint64_t)len * 8;
	size_t rest, n, i;

	for (; len >= 64; len -= 64, p += 64)
		block(h, p);
	rest = len;
	memcpy(tail, p, rest);
	tail[rest] = 0x80;
	n = rest + 1 + 8 <= 64 ? 64 : 128;
	memset(tail + rest + 1, 0, n - rest - 1);
	for (i = 0; i < 8; i++)
		tail[n - 1 - i] = (unsigned char)(bits >> (8 * i));
	block(h, tail);
	if (n == 128)
		block(h, tail + 64);
	for (i = 0; i < 5; i++)
		snprintf(out + 8 * i, 9, "%08x", h[i]);
}
