/*
 * aeshash.c -- the AES-128 key expansion (FIPS-197 section 5.2, with
 * AESKEYGENASSIST), the run-time check for AES-NI, and the hash out of
 * line (aeshash.h says what it computes and why).
 */
#include "util/aeshash.h"

#if SLUICE_HAVE_AESHASH
#include <cpuid.h>

/* One round key from the previous one and AESKEYGENASSIST's answer g. */
static inline SLUICE_AES_TARGET __m128i expand_step(__m128i k, __m128i g)
{
	g = _mm_shuffle_epi32(g, 0xff);
	k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
	k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
	k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
	return _mm_xor_si128(k, g);
}

#define EXPAND(i, rcon)                                                        \
	(k[i] = expand_step(k[i - 1],                                          \
			    _mm_aeskeygenassist_si128(k[i - 1], rcon)))

static SLUICE_AES_TARGET void expand(const uint8_t key[16], uint8_t rk[11][16])
{
	__m128i k[11];
	int i;

	k[0] = _mm_loadu_si128((const __m128i *)(const void *)key);
	EXPAND(1, 0x01);
	EXPAND(2, 0x02);
	EXPAND(3, 0x04);
	EXPAND(4, 0x08);
	EXPAND(5, 0x10);
	EXPAND(6, 0x20);
	EXPAND(7, 0x40);
	EXPAND(8, 0x80);
	EXPAND(9, 0x1b);
	EXPAND(10, 0x36);
	for (i = 0; i < 11; i++)
		_mm_store_si128((__m128i *)(void *)rk[i], k[i]);
}

static int have_aes(void)
{
	unsigned a, b, c, d;

	/* CPUID leaf 1: ECX bit 25 is AES-NI. */
	return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 25));
}

int sluice_aeshash_init(sluice_aeshash_t *a, const uint8_t key[32])
{
	if (!have_aes())
		return -1;
	expand(key, a->rk[0]);
	expand(key + 16, a->rk[1]);
	return 0;
}

SLUICE_AES_TARGET void sluice_aeshash(const sluice_aeshash_t *a,
				      const void *key, size_t len,
				      uint64_t out[2])
{
	sluice_aeshash_in(a, key, len, out);
}

SLUICE_AES_TARGET void sluice_aeshash_block(const sluice_aeshash_t *a,
					    int which, const uint8_t in[16],
					    uint8_t out[16])
{
	__m128i x = _mm_loadu_si128((const __m128i *)(const void *)in);

	x = sluice_aes128_enc(a->rk[which != 0], x);
	_mm_storeu_si128((__m128i *)(void *)out, x);
}

#else

int sluice_aeshash_init(sluice_aeshash_t *a, const uint8_t key[32])
{
	(void)a;
	(void)key;
	return -1;
}

void sluice_aeshash(const sluice_aeshash_t *a, const void *key, size_t len,
		    uint64_t out[2])
{
	(void)a;
	(void)key;
	(void)len;
	out[0] = out[1] = 0; /* never called: init refused */
}

void sluice_aeshash_block(const sluice_aeshash_t *a, int which,
			  const uint8_t in[16], uint8_t out[16])
{
	(void)a;
	(void)which;
	(void)in;
	memset(out, 0, 16);
}

#endif
