/*
 * siphash.h -- SipHash-1-3-128, a keyed hash for tables whose keys come from
 * clients: without the secret key nobody can aim many keys at one bucket.
 */
#ifndef SLUICE_UTIL_SIPHASH_H
#define SLUICE_UTIL_SIPHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* SipHash-1-3 with 128-bit output, as two 64-bit halves. */
void sluice_siphash13_128(const uint8_t key[16], const void *data, size_t len,
			  uint64_t out[2]);

/* The same, in line: for the memory store's single take, where the call's
 * own instructions delay the next take (buckets_take.c). */
#define SLUICE_SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SLUICE_SIPROUND                                                        \
	do {                                                                   \
		v0 += v1;                                                      \
		v1 = SLUICE_SIP_ROTL(v1, 13);                                  \
		v1 ^= v0;                                                      \
		v0 = SLUICE_SIP_ROTL(v0, 32);                                  \
		v2 += v3;                                                      \
		v3 = SLUICE_SIP_ROTL(v3, 16);                                  \
		v3 ^= v2;                                                      \
		v0 += v3;                                                      \
		v3 = SLUICE_SIP_ROTL(v3, 21);                                  \
		v3 ^= v0;                                                      \
		v2 += v1;                                                      \
		v1 = SLUICE_SIP_ROTL(v1, 17);                                  \
		v1 ^= v2;                                                      \
		v2 = SLUICE_SIP_ROTL(v2, 32);                                  \
	} while (0)

static inline uint64_t sluice_sip_load64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8); /* little-endian hosts only (x86_64, aarch64) */
	return v;
}

static inline void sluice_siphash13_128_in(const uint8_t key[16],
					   const void *data, size_t len,
					   uint64_t out[2])
{
	const uint8_t *in = data;
	uint64_t k0 = sluice_sip_load64(key), k1 = sluice_sip_load64(key + 8);
	uint64_t v0 = 0x736f6d6570736575ULL ^ k0;
	uint64_t v1 = 0x646f72616e646f6dULL ^ k1 ^ 0xee; /* 128-bit output */
	uint64_t v2 = 0x6c7967656e657261ULL ^ k0;
	uint64_t v3 = 0x7465646279746573ULL ^ k1;
	uint64_t b = (uint64_t)len << 56, m;
	size_t i, tail = len & 7;

	for (i = 0; i + 8 <= len; i += 8) {
		m = sluice_sip_load64(in + i);
		v3 ^= m;
		SLUICE_SIPROUND;
		v0 ^= m;
	}
	m = 0;
	if (tail)
		memcpy(&m, in + i, tail);
	b |= m;
	v3 ^= b;
	SLUICE_SIPROUND;
	v0 ^= b;
	v2 ^= 0xee;
	SLUICE_SIPROUND;
	SLUICE_SIPROUND;
	SLUICE_SIPROUND;
	out[0] = v0 ^ v1 ^ v2 ^ v3;
	v1 ^= 0xdd;
	SLUICE_SIPROUND;
	SLUICE_SIPROUND;
	SLUICE_SIPROUND;
	out[1] = v0 ^ v1 ^ v2 ^ v3;
}

#undef SLUICE_SIPROUND
#undef SLUICE_SIP_ROTL

/* Fills buf with len random bytes from the kernel (getrandom), falling back
 * to a time- and address-derived value if that fails. */
void sluice_random_bytes(void *buf, size_t len);

#endif
