/*
 * sha256.h -- SHA-256 (FIPS 180-4), used to shorten over-long key values
 * into fixed-size identities that a client cannot make collide.
 */
#ifndef SLUICE_UTIL_SHA256_H
#define SLUICE_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

/* One-shot digest of several buffers concatenated. */
void sluice_sha256(const void *const *bufs, const size_t *lens, size_t n,
		   uint8_t out[32]);

#endif /* SLUICE_UTIL_SHA256_H */
