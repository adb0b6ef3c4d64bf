/*
 * check.h -- the unit tests' tiny harness.  Each test is a function; RUN()
 * calls it and counts; CHECK() fails the current test with file:line and
 * the expression.  Every C test uses this one CHECK.  main() ends with
 * TESTS_DONE(), which prints "N passed, N failed" and sets the exit status.
 */
#ifndef SLUICE_TEST_CHECK_H
#define SLUICE_TEST_CHECK_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define CHECK_UNUSED __attribute__((unused))
#else
#define CHECK_UNUSED
#endif

static int check_failed_now CHECK_UNUSED, check_passed CHECK_UNUSED,
	check_failed CHECK_UNUSED;
/* Inside RUN() a failed CHECK ends the current test (from any function it
 * calls, void or not) and the next one runs; outside RUN() (the Redis
 * tests, one scenario per main) it ends the program with status 1. */
static jmp_buf check_jmp CHECK_UNUSED;
static int check_in_run CHECK_UNUSED;

static inline void check_fail(void)
{
	check_failed_now = 1;
	if (check_in_run)
		longjmp(check_jmp, 1);
	exit(1);
}

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #cond);                              \
			check_fail();                                          \
		}                                                              \
	} while (0)

#define CHECK_EQ_U64(a, b)                                                     \
	do {                                                                   \
		uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);               \
		if (a_ != b_) {                                                \
			fprintf(stderr,                                        \
				"%s:%d: CHECK failed: %s == %s (%" PRIu64      \
				" != %" PRIu64 ")\n",                          \
				__FILE__, __LINE__, #a, #b, a_, b_);           \
			check_fail();                                          \
		}                                                              \
	} while (0)

#define RUN(test)                                                              \
	do {                                                                   \
		check_failed_now = 0;                                          \
		check_in_run = 1;                                              \
		if (setjmp(check_jmp) == 0)                                    \
			test();                                                \
		check_in_run = 0;                                              \
		if (check_failed_now) {                                        \
			check_failed++;                                        \
			fprintf(stderr, "FAIL %s\n", #test);                   \
		} else {                                                       \
			check_passed++;                                        \
			fprintf(stderr, "ok   %s\n", #test);                   \
		}                                                              \
	} while (0)

#define TESTS_DONE()                                                           \
	do {                                                                   \
		printf("%d passed, %d failed\n", check_passed, check_failed);  \
		return check_failed ? 1 : 0;                                   \
	} while (0)

/* splitmix64: a small deterministic generator for property tests. */
static inline uint64_t test_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

#endif
