/*
 * test_invariants.c -- SLUICE_ASSERT (src/util/invariant.h) is live in the
 * test build: a broken invariant aborts with its file:line and its
 * expression, whether stated here or inside the core or the bucket table;
 * one that holds evaluates its condition once; and the release form never
 * evaluates it.  Each abort happens in a child process, its stderr read
 * back through a pipe.
 */
#include "check.h"
#include "core/decide.h"
#include "store/buckets_int.h"
#include "util/invariant.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn() in a child whose stderr goes to out (NUL-terminated, cut at
 * len - 1); 1 when the child died of SIGABRT. */
static int aborts(void (*fn)(void), char *out, size_t len)
{
	size_t got = 0;
	int fds[2], status = 0;
	ssize_t n;
	pid_t pid;

	CHECK(pipe(fds) == 0);
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		if (dup2(fds[1], STDERR_FILENO) < 0)
			_exit(3);
		fn();
		_exit(0);
	}
	close(fds[1]);
	while (got + 1 < len &&
	       (n = read(fds[0], out + got, len - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = '\0';
	close(fds[0]);
	CHECK(waitpid(pid, &status, 0) == pid);
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void holds(void)
{
	SLUICE_ASSERT(1 + 1 == 2);
}

/* A broken invariant when fire is set; its line either way (one line, so
 * that the parent learns the line its child aborts on). */
/* clang-format off */
static int broken_here(int fire) { if (fire) SLUICE_ASSERT(2 + 2 == 5); return __LINE__; }
/* clang-format on */

static void fire_broken(void)
{
	broken_here(1);
}

/* decide_encode() relies on its callers clamping the clock (as every one
 * of them does): one that did not would overflow int64. */
static void encode_before_the_clock_is_clamped(void)
{
	(void)decide_encode(-1, 1, 1);
}

/* Removing a slot past a shard's end: caught before the write. */
static void remove_past_the_end(void)
{
	static sluice_slot_t slots[MIN_SLOTS];
	static sluice_table_t t;
	sluice_shard_t s;

	memset(&s, 0, sizeof(s));
	s.t = &t;
	s.slots = slots;
	s.mask = MIN_SLOTS - 1;
	s.can_grow = 1;
	sluice_shard_remove_at(&s, MIN_SLOTS);
}

static void test_the_harness_tells_abort_from_exit(void)
{
	char err[256];

	CHECK(!aborts(holds, err, sizeof(err)));
	CHECK(err[0] == '\0');
}

static void test_a_broken_invariant_aborts_with_where_and_what(void)
{
	char err[512], want[64];

	CHECK(aborts(fire_broken, err, sizeof(err)));
	snprintf(want, sizeof(want), "test_invariants.c:%d: ", broken_here(0));
	CHECK(strstr(err, want) != NULL);
	CHECK(strstr(err, "broken_here") != NULL);
	CHECK(strstr(err, "invariant `2 + 2 == 5' broken") != NULL);
}

static void test_a_condition_that_holds_is_evaluated_once(void)
{
	int n = 0;

	/* A side effect only to count evaluations: real asserts have none
	 * (the release form never runs them). */
	SLUICE_ASSERT(++n == 1);
	CHECK(n == 1);
}

static void test_the_core_checks_its_own_invariants(void)
{
	char err[512];

	CHECK(aborts(encode_before_the_clock_is_clamped, err, sizeof(err)));
	CHECK(strstr(err, "core/decide.h:") != NULL);
	CHECK(strstr(err, "now_us >= 0") != NULL);
}

static void test_the_bucket_table_checks_its_indices(void)
{
	char err[512];

	CHECK(aborts(remove_past_the_end, err, sizeof(err)));
	CHECK(strstr(err, "store/buckets_table.c:") != NULL);
	CHECK(strstr(err, "i <= s->mask") != NULL);
}

/* The release form, from here to the end of the file: the header again
 * without SLUICE_ASSERTS. */
#undef SLUICE_UTIL_INVARIANT_H
#undef SLUICE_ASSERT
#pragma push_macro("SLUICE_ASSERTS")
#undef SLUICE_ASSERTS
#include "util/invariant.h"

static void test_the_release_form_never_evaluates_its_condition(void)
{
	int n = 0;

	SLUICE_ASSERT(++n == 5);
	CHECK(n == 0);
}
#pragma pop_macro("SLUICE_ASSERTS")

int main(void)
{
#if !defined(SLUICE_ASSERTS) || !SLUICE_ASSERTS
	fprintf(stderr, "built without SLUICE_ASSERTS: the invariants are "
			"not checked (CMakeLists.txt defines it for Debug and "
			"SLUICE_SANITIZE builds)\n");
	return 1;
#endif
	RUN(test_the_harness_tells_abort_from_exit);
	RUN(test_a_broken_invariant_aborts_with_where_and_what);
	RUN(test_a_condition_that_holds_is_evaluated_once);
	RUN(test_the_core_checks_its_own_invariants);
	RUN(test_the_bucket_table_checks_its_indices);
	RUN(test_the_release_form_never_evaluates_its_condition);
	TESTS_DONE();
}
