/*
 * siphash.h -- SipHash-1-3-128, a keyed hash for tables whose keys come from
 * clients: without the secret key nobody can aim many keys at one bucket.
 */
#ifndef SLUICE_UTIL_SIPHASH_H
#define SLUICE_UTIL_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* SipHash-1-3 with 128-bit output, as two 64-bit halves. */
void sluice_siphash13_128(const uint8_t key[16], const void *data, size_t len,
			  uint64_t out[2]);

/* Fills buf with len random bytes from the kernel (getrandom), falling back
 * to a time- and address-derived value if that fails. */
void sluice_random_bytes(void *buf, size_t len);

#endif
