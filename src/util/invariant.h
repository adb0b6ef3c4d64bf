/*
 * invariant.h -- SLUICE_ASSERT(cond): a fact the code relies on, checked
 * in the builds that test it and free in the build that ships.
 *
 * Checked when SLUICE_ASSERTS is non-zero, which CMakeLists.txt defines
 * for the Debug build, for a build with no type and for every build with
 * SLUICE_SANITIZE or SLUICE_FUZZ on, whatever its type (make test, make
 * fuzz).  A broken invariant prints "file:line: function: invariant
 * `cond' broken" on stderr and aborts: a SIGABRT, so that a sanitizer's
 * report, a core and the test harness all see it.  Everywhere else
 * (Release, RelWithDebInfo, the Debian package, the Node addon's and the
 * nginx module's builds) it compiles to nothing: the condition is only an
 * operand of sizeof, never evaluated, so it costs nothing on a hot path
 * and a variable that only an assert reads draws no warning.
 *
 * What goes in one: a fact about this process's own state that holds
 * whatever the input (a bound the arithmetic guarantees, an index a mask
 * made, a count kept in step), cheap to test (no walk over a table on a
 * hot path), with no side effect (a release build never runs it).  Never
 * a check of what comes from outside -- a request, a config, a Redis
 * reply, the bytes of a shared file that another process may have
 * written: those are refused with an error, as they are in release.
 *
 * Every invariant in src/ is stated with this: no file there calls
 * assert(), which NDEBUG turns off in a sanitized Release and which the
 * nginx module's build keeps (tests/unit/test_layers.py checks).
 */
#ifndef SLUICE_UTIL_INVARIANT_H
#define SLUICE_UTIL_INVARIANT_H

#if defined(SLUICE_ASSERTS) && SLUICE_ASSERTS

#include <stdio.h>
#include <stdlib.h>

/* Cold (kept off the hot path): a check that holds is
 * one compare and a branch not taken. */
static inline __attribute__((noreturn, cold)) void
sluice__assert_fail(const char *expr, const char *file, int line,
		    const char *func)
{
	fprintf(stderr, "%s:%d: %s: invariant `%s' broken\n", file, line, func,
		expr);
	abort();
}

#define SLUICE_ASSERT(cond)                                                    \
	(__builtin_expect(!!(cond), 1)                                         \
		 ? (void)0                                                     \
		 : sluice__assert_fail(#cond, __FILE__, __LINE__, __func__))

#else

#define SLUICE_ASSERT(cond) ((void)sizeof(!(cond)))

#endif

#endif /* SLUICE_UTIL_INVARIANT_H */
