/*
 * prng.h -- the simulator's own pseudo-random numbers (splitmix64).
 *
 * The simulator must print the same report for the same seed on every
 * machine and libc, so it never calls rand() or random(): splitmix64 is a
 * few lines, passes BigCrush, and its output depends on the seed alone.
 */
#ifndef SLUICE_SIM_PRNG_H
#define SLUICE_SIM_PRNG_H

#include <stdint.h>

typedef struct sluice_prng_s {
	uint64_t s;
} sluice_prng_t;

static inline void sluice_prng_seed(sluice_prng_t *r, uint64_t seed)
{
	r->s = seed;
}

static inline uint64_t sluice_prng_next(sluice_prng_t *r)
{
	uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [0, n) for n >= 1 (Lemire's multiply-shift; the tiny bias
 * for huge n does not matter for traffic shapes). */
static inline uint64_t sluice_prng_below(sluice_prng_t *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)sluice_prng_next(r) * n) >> 64);
}

/* Uniform in [lo, hi] (inclusive), lo <= hi. */
static inline int64_t sluice_prng_range(sluice_prng_t *r, int64_t lo,
					int64_t hi)
{
	return lo + (int64_t)sluice_prng_below(r, (uint64_t)(hi - lo) + 1);
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double sluice_prng_unit(sluice_prng_t *r)
{
	return (double)(sluice_prng_next(r) >> 11) * 0x1.0p-53;
}

#endif /* SLUICE_SIM_PRNG_H */
