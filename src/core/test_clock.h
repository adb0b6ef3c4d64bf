/*
 * test_clock.h -- a test-only hook on the library's clock (not exported:
 * for programs linked with the library's objects, like `sluice`).
 */
#ifndef SLUICE_CORE_TEST_CLOCK_H
#define SLUICE_CORE_TEST_CLOCK_H

#include <stdint.h>

/* From now on sluice_now_us() adds `us` (0: the wall clock).  Call before
 * any other thread reads the clock. */
void sluice__set_test_clock_offset(int64_t us);

#endif /* SLUICE_CORE_TEST_CLOCK_H */
