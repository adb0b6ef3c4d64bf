/*
 * aeshash.h -- a keyed 128-bit hash of keys of at most 16 bytes, one AES-128
 * encryption (AES-NI): the local stores' key identity for such keys, in
 * place of SipHash-1-3-128 (siphash.h), with the same property: without the
 * secret keys nobody can aim two keys at one bucket.
 *
 * A key of len < 16 bytes is the block of its bytes, zeros, and len in the
 * last byte (one block per key: the encoding is injective), encrypted under
 * the secret key A; a key of exactly 16 bytes is its own block, encrypted
 * under the independent secret key B.  AES-128 under a secret random key is
 * a pseudorandom permutation: two keys of one class never share a hash, and
 * a key of either class shares one with a key of the other only by the
 * chance of two independent random 128-bit values (2^-128), which no choice
 * of keys improves without the secret keys.  SipHash-1-3-128, a PRF by
 * design, makes the same promise with about 9 rounds of 14 instructions;
 * this costs about 15 instructions, which matters on the memory store's
 * single take: the processor keeps only a few hundred instructions in
 * flight behind a take's cache miss, and the fewer a take has, the sooner
 * the next take's miss starts (docs/BENCHMARKS.md, scaling).
 *
 * x86-64 with AES-NI only (checked at run time); elsewhere
 * sluice_aeshash_init() returns -1 and the store keeps SipHash.  The
 * memory store's hashes live only in the process that computed them.  The
 * shared-memory store's file records which hash it uses (with its keys),
 * chosen by its creator; every process sharing it runs on that host, and
 * one that cannot compute it refuses the file (store/shm_file.c).
 */
#ifndef SLUICE_UTIL_AESHASH_H
#define SLUICE_UTIL_AESHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SLUICE_HAVE_AESHASH 1
#include <immintrin.h>
/* What a function that computes the hash in line is compiled for. */
#define SLUICE_AES_TARGET __attribute__((target("aes,sse2")))
#else
#define SLUICE_HAVE_AESHASH 0
#endif

/* The longest key the hash takes. */
#define SLUICE_AESHASH_MAX 16

/* The two expanded keys: rk[0] (A) for keys shorter than 16 bytes, rk[1]
 * (B) for keys of 16 bytes. */
typedef struct sluice_aeshash_s {
	_Alignas(16) uint8_t rk[2][11][16];
} sluice_aeshash_t;

/* Expands the two AES-128 keys (key[0..16) is A, key[16..32) is B): 0, or
 * -1 when this processor (or build) has no AES instructions. */
int sluice_aeshash_init(sluice_aeshash_t *a, const uint8_t key[32]);

/* The hash of key[0..len), len <= SLUICE_AESHASH_MAX, as two 64-bit
 * halves (the block's bytes 0..7 and 8..15, little-endian); a must have
 * been initialised (sluice_aeshash_init() returned 0). */
void sluice_aeshash(const sluice_aeshash_t *a, const void *key, size_t len,
		    uint64_t out[2]);

/* AES-128 encryption of one block under expanded key which (0: A, 1: B):
 * the primitive alone, for tests against FIPS-197. */
void sluice_aeshash_block(const sluice_aeshash_t *a, int which,
			  const uint8_t in[16], uint8_t out[16]);

#if SLUICE_HAVE_AESHASH
/* The block of a key of len <= 16 bytes, as two 64-bit words, read with
 * scalar loads of the caller's bytes (none outside them): a 16-byte load
 * of a key the caller has just written in two 8-byte stores cannot take
 * them from the store buffer and waits until they reach the cache, which
 * is after every earlier instruction, a take's cache miss included. */
static inline void sluice_aeshash_words(const uint8_t *p, size_t len,
					uint64_t *lo, uint64_t *hi)
{
	uint64_t a = 0, b = 0;
	uint32_t x, y;

	if (len >= 8) {
		memcpy(&a, p, 8);
		if (len > 8) {
			memcpy(&b, p + len - 8, 8);
			b >>= 8 * (16 - len);
		}
	} else if (len >= 4) {
		memcpy(&x, p, 4);
		memcpy(&y, p + len - 4, 4);
		a = x | (uint64_t)y << (8 * (len - 4));
	} else if (len > 0) {
		a = p[0] | (uint64_t)p[len / 2] << (8 * (len / 2)) |
		    (uint64_t)p[len - 1] << (8 * (len - 1));
	}
	if (len < 16)
		b |= (uint64_t)len << 56;
	*lo = a;
	*hi = b;
}

static inline SLUICE_AES_TARGET __m128i
sluice_aes128_enc(const uint8_t rk[11][16], __m128i x)
{
	const __m128i *k = (const __m128i *)(const void *)rk;

	x = _mm_xor_si128(x, _mm_load_si128(&k[0]));
	x = _mm_aesenc_si128(x, _mm_load_si128(&k[1]));
	x = _mm_aesenc_si128(x, _mm_load_si128(&k[2]));
	x = _mm_aesenc_si128(x, _mm_load_si128(&k[3]));
	x = _mm_aesenc_si128(x, _mm_load_si128(&k[4]));
	x = _mm_aesenc_si128(x, _mm_load_si128(&k[5]));
	x = _mm_aesenc_si128(x, _mm_load_si128(&k[6]));
	x = _mm_aesenc_si128(x, _mm_load_si128(&k[7]));
	x = _mm_aesenc_si128(x, _mm_load_si128(&k[8]));
	x = _mm_aesenc_si128(x, _mm_load_si128(&k[9]));
	return _mm_aesenclast_si128(x, _mm_load_si128(&k[10]));
}

/* sluice_aeshash() in line, for a function compiled SLUICE_AES_TARGET
 * (the memory store's single take). */
static inline SLUICE_AES_TARGET void
sluice_aeshash_in(const sluice_aeshash_t *a, const void *key, size_t len,
		  uint64_t out[2])
{
	uint64_t lo, hi;
	__m128i x;

	sluice_aeshash_words(key, len, &lo, &hi);
	x = sluice_aes128_enc(a->rk[len == 16],
			      _mm_set_epi64x((long long)hi, (long long)lo));
	out[0] = (uint64_t)_mm_cvtsi128_si64(x);
	out[1] = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x));
}
#endif

#endif
