/*
 * test_shmstore.c -- the shared-memory store: processes on one file share
 * buckets exactly, a process SIGKILLed at any instruction blocks no one and
 * corrupts nothing, and a store on a file decides as the memory store
 * does.  Its files: test_shmstore_files.c; a damaged one:
 * test_shmstore_damage.c.
 */
#include "check.h"
#include "shm_test.h"
#include "sluice.h"
#include "store/shm.h"
#include "stores.h"
#include "util/aeshash.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------ sharing between processes */

#define HAMMER_PROCS 4

/*
 * One hammering process: takes the burst at `start`, then takes one token
 * every STEP_US of the store's time up to start + duration_us, then
 * whatever the bucket still holds at that instant.  The processes run
 * concurrently for real, each on its own clock; since each asks far more
 * often than tokens come (STEP_US is a hundredth of the emission interval),
 * the buckets never sit full and lose tokens, whatever the scheduler does
 * (a real clock would lose every token a stalled machine let overflow):
 * together they can take exactly capacity + rate x duration.  Writes its
 * count to fd.
 */
#define STEP_US 10
static void hammer(const char *path, int shared, int64_t start,
		   int64_t duration_us, const sluice_limit_t *l, int fd)
{
	sluice_shmstore_t *s = shared ? open_store(path, 1000) : NULL;
	sluice_memstore_t *m = shared ? NULL : open_memstore(1000);
	int64_t t = start;
	uint64_t allowed = 0;
	int rc, phase;

	if (!s && !m)
		_exit(3);
	/* 0: the burst at start; 1: the real clock; 2: the end instant. */
	for (phase = 0; phase < 3; phase++)
		for (;;) {
			if (phase == 1) {
				t += STEP_US;
				if (t >= start + duration_us)
					break;
			} else if (phase == 2) {
				t = start + duration_us;
			}
			rc = s ? sluice_shmstore_take(s, "k", 1, l, 1, 1, t,
						      NULL, NULL)
			       : sluice_memstore_take(m, "k", 1, l, 1, 1, t,
						      NULL, NULL);
			if (rc < 0)
				_exit(4);
			allowed += (uint64_t)rc;
			if (phase != 1 && rc == 0)
				break;
		}
	if (write(fd, &allowed, sizeof(allowed)) != sizeof(allowed))
		_exit(5);
	sluice_shmstore_close(s);
	sluice_memstore_free(m);
	_exit(0);
}

/* Runs HAMMER_PROCS hammering processes; returns their total. */
static uint64_t hammer_all(const char *path, int shared, int64_t duration_us,
			   const sluice_limit_t *l)
{
	pid_t pids[HAMMER_PROCS];
	uint64_t total = 0, one;
	int fds[2], i, status;

	if (pipe(fds) != 0)
		return 0;
	for (i = 0; i < HAMMER_PROCS; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			close(fds[0]);
			hammer(path, shared, T0, duration_us, l, fds[1]);
		}
	}
	close(fds[1]);
	for (i = 0; i < HAMMER_PROCS; i++)
		if (read(fds[0], &one, sizeof(one)) == sizeof(one))
			total += one;
	close(fds[0]);
	for (i = 0; i < HAMMER_PROCS; i++)
		if (pids[i] > 0 &&
		    (waitpid(pids[i], &status, 0) != pids[i] ||
		     !WIFEXITED(status) || WEXITSTATUS(status) != 0))
			return 0;
	return total;
}

/* Four processes, one key, 100 burst at 1000/s over 5 s: 5100 pass in
 * all (+-2), as if one process had taken them. */
static void test_four_processes_share_one_bucket_exactly(void)
{
	sluice_limit_t l = limit("100", "1000/s");
	const char *path = shm_path("four");
	uint64_t total = hammer_all(path, 1, 5000000, &l);

	unlink(path);
	fprintf(stderr, "     shared: %" PRIu64 " allowed (expect 5100)\n",
		total);
	CHECK(total >= 5098 && total <= 5102);
}

/* The same on a memory store per process: each process has the whole
 * limit, four times over (over 2 s: 4 x 2100). */
static void test_memory_store_per_process_overruns_fourfold(void)
{
	sluice_limit_t l = limit("100", "1000/s");
	uint64_t total = hammer_all(NULL, 0, 2000000, &l);

	fprintf(stderr, "     per-process: %" PRIu64 " allowed (one: 2100)\n",
		total);
	CHECK(total >= 4 * 2100 - 8 && total <= 4 * 2100 + 8);
}

/* --------------------------------------------------------- crash safety */

#define CRASH_KEYS     8
#define SURVIVORS      2
#define SURVIVOR_TAKES 40000
#define TAKE_BOUND_US  (20 * 1000000LL) /* generous: no take waits this long */
#define KILLS	       300
#ifndef CRASH_DEADLINE_S
#define CRASH_DEADLINE_S 240
#endif

static sluice_limit_t crash_limits[2];

static void crash_take(sluice_shmstore_t *s, uint64_t *rng, int *allowed)
{
	char key[8];
	int k = (int)(test_rand(rng) % CRASH_KEYS), rc;

	snprintf(key, sizeof(key), "k%d", k);
	if (test_rand(rng) % 4 == 0) {
		/* Two keys at once: two shard locks held together. */
		char key2[8];
		sluice_take_item_t it[2];

		snprintf(key2, sizeof(key2), "k%d", (k + 1) % CRASH_KEYS);
		memset(it, 0, sizeof(it));
		it[0] = (sluice_take_item_t){key, strlen(key), crash_limits, 2,
					     1,	  0,	       {0}};
		it[1] = (sluice_take_item_t){
			key2, strlen(key2), crash_limits, 2, 1, 0, {0}};
		rc = sluice_shmstore_take_many(s, it, 2, T0);
		*allowed = rc == 1 ? 2 : rc;
		return;
	}
	rc = sluice_shmstore_take(s, key, strlen(key), crash_limits, 2, 1, T0,
				  NULL, NULL);
	*allowed = rc;
}

/* A survivor: SURVIVOR_TAKES takes, each timed; writes its charges, or
 * exits 6 when a take blocked past the bound. */
static void survivor(const char *path, uint64_t seed, int fd)
{
	sluice_shmstore_t *s = open_store(path, 4096);
	uint64_t charged = 0;
	int i, a;

	if (!s)
		_exit(3);
	for (i = 0; i < SURVIVOR_TAKES; i++) {
		int64_t t = mono_us();

		crash_take(s, &seed, &a);
		if (a < 0) {
			fprintf(stderr, "survivor: a take failed: %d\n", a);
			_exit(4);
		}
		if (mono_us() - t > TAKE_BOUND_US)
			_exit(6);
		charged += (uint64_t)a;
	}
	if (write(fd, &charged, sizeof(charged)) != sizeof(charged))
		_exit(5);
	_exit(0);
}

/* The victim: takes forever, reporting each charge (one byte per token)
 * after its take returned, until it is killed.  A take in flight when the
 * SIGKILL lands may be charged and unreported: at most 2 tokens a kill. */
static void victim(const char *path, uint64_t seed, int fd)
{
	sluice_shmstore_t *s = open_store(path, 4096);
	char two[2] = {1, 1};
	int a;

	if (!s)
		_exit(3);
	for (;;) {
		crash_take(s, &seed, &a);
		if (a > 0 && write(fd, two, (size_t)a) != a)
			_exit(5);
	}
}

/* Tokens consumed from limit j over every key, peeked with cost 0. */
static uint64_t consumed(sluice_shmstore_t *s, size_t j)
{
	sluice_decision_t d[2];
	uint64_t sum = 0;
	char key[8];
	int k;

	for (k = 0; k < CRASH_KEYS; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		sluice_shmstore_take(s, key, strlen(key), crash_limits, 2, 0,
				     T0, d, NULL);
		sum += crash_limits[j].capacity - d[j].remaining;
	}
	return sum;
}

static uint64_t drain(int fd)
{
	char buf[4096];
	uint64_t n = 0;
	ssize_t got;

	while ((got = read(fd, buf, sizeof(buf))) > 0)
		n += (uint64_t)got;
	return n;
}

static void test_sigkilled_process_blocks_no_one_and_corrupts_nothing(void)
{
	const char *path = shm_path("crash");
	sluice_shmstore_t *s = open_store(path, 4096);
	sluice_memstore_stats_t st;
	pid_t surv[SURVIVORS], v;
	uint64_t seed = 42, survivors = 0, reported = 0, one, a, b;
	int sp[2], vp[2], i, kills = 0, status, running = SURVIVORS, blocked;
	int64_t deadline = mono_us() + CRASH_DEADLINE_S * 1000000LL;
	char err[256];

	/* Every take is at T0: nothing refills. */
	crash_limits[0] = limit("100000000", "1000/s");
	crash_limits[1] = limit("200000000", "7/s");
	CHECK(s);
	CHECK(pipe(sp) == 0 && pipe(vp) == 0);
	fcntl(vp[0], F_SETFL, O_NONBLOCK);
	for (i = 0; i < SURVIVORS; i++)
		if ((surv[i] = fork()) == 0)
			survivor(path, 1000 + (uint64_t)i, sp[1]);
	/* Kill victims while the survivors run.  The parent takes no shard
	 * lock meanwhile: on locks that are not robust a dead victim would
	 * block it too, and the test must fail, not hang. */
	while ((kills < KILLS || running > 0) && kills < 10 * KILLS &&
	       mono_us() < deadline) {
		if ((v = fork()) == 0)
			victim(path, test_rand(&seed), vp[1]);
		usleep((useconds_t)(200 + test_rand(&seed) % 2000));
		kill(v, SIGKILL);
		waitpid(v, &status, 0);
		kills++;
		reported += drain(vp[0]);
		for (i = 0; i < SURVIVORS; i++)
			if (surv[i] > 0 &&
			    waitpid(surv[i], &status, WNOHANG) == surv[i]) {
				if (!WIFEXITED(status) ||
				    WEXITSTATUS(status) != 0)
					fprintf(stderr,
						"survivor: status 0x%x (exit "
						"3: open, 4: take failed, "
						"6: take blocked)\n",
						(unsigned)status);
				CHECK(WIFEXITED(status) &&
				      WEXITSTATUS(status) == 0);
				surv[i] = 0;
				running--;
			}
	}
	/* Every survivor finishes in time: nobody waits on the dead. */
	blocked = 0;
	for (i = 0; i < SURVIVORS; i++) {
		int st_i = 0;

		while (surv[i] > 0 && mono_us() < deadline &&
		       waitpid(surv[i], &st_i, WNOHANG) == 0)
			usleep(10000);
		if (surv[i] > 0 && mono_us() >= deadline) {
			kill(surv[i], SIGKILL);
			waitpid(surv[i], &st_i, 0);
			blocked++;
		} else if (surv[i] > 0 &&
			   (!WIFEXITED(st_i) || WEXITSTATUS(st_i) != 0)) {
			blocked++; /* exit 6: a take waited past the bound */
		}
	}
	CHECK(blocked == 0);
	close(sp[1]);
	while (read(sp[0], &one, sizeof(one)) == sizeof(one))
		survivors += one;
	close(sp[0]);
	close(vp[1]);
	reported += drain(vp[0]);
	close(vp[0]);

	sluice_shmstore_stats(s, &st);
	a = consumed(s, 0);
	b = consumed(s, 1);
	fprintf(stderr,
		"     %d kills, %" PRIu64
		" repairs; charged: survivors %" PRIu64 ", victims %" PRIu64
		"..+%d; buckets: %" PRIu64 ", %" PRIu64 "\n",
		kills, st.recovered, survivors, reported, 2 * kills, a, b);
	CHECK(sluice_shmstore_check(s, err, sizeof(err)) == 0);
	CHECK(kills >= KILLS);
	CHECK(st.recovered >= 1);
	/* Each limit holds every reported charge, and at most the takes in
	 * flight at the kills besides. */
	CHECK(a >= survivors + reported &&
	      a <= survivors + reported + 2 * kills);
	CHECK(b >= survivors + reported &&
	      b <= survivors + reported + 2 * kills);
	sluice_shmstore_close(s);
	unlink(path);
}

/* ------------------------------------------------------ same as memory */

/* Random takes over a few keys and limits decide the same in both local
 * stores (with room for every bucket: which bucket an eviction picks
 * depends on slot order, which differs). */
static void test_decides_as_the_memory_store(void)
{
	const char *path = shm_path("same");
	sluice_shmstore_t *s = open_store(path, 1000);
	sluice_memstore_t *m = open_memstore(1000);
	sluice_limit_t ls[3] = {limit("5", "1/s"), limit("20", "10/min"),
				limit("3", "2/s")};
	sluice_decision_t ds[3], dm[3], sums, summ;
	uint64_t rng = 7;
	int i;

	CHECK(s && m);
	for (i = 0; i < 20000; i++) {
		char key[8];
		size_t first = test_rand(&rng) % 3;
		size_t n = 1 + test_rand(&rng) % (3 - first);
		uint64_t cost = test_rand(&rng) % 3;
		int64_t t = T0 + i * 20000;

		snprintf(key, sizeof(key), "u%d", (int)(test_rand(&rng) % 40));
		CHECK(sluice_shmstore_take(s, key, strlen(key), ls + first, n,
					   cost, t, ds, &sums) ==
		      sluice_memstore_take(m, key, strlen(key), ls + first, n,
					   cost, t, dm, &summ));
		CHECK(sums.allowed == summ.allowed &&
		      sums.remaining == summ.remaining &&
		      sums.retry_after_us == summ.retry_after_us &&
		      sums.reset_after_us == summ.reset_after_us &&
		      sums.which == summ.which);
	}
	CHECK(sluice_shmstore_check(s, NULL, 0) == 0);
	sluice_shmstore_close(s);
	sluice_memstore_free(m);
	unlink(path);
}

/* Closing and opening again finds the bucket as it was left. */
static void test_reopened_store_keeps_a_drained_bucket(void)
{
	const char *path = shm_path("reopen");
	sluice_limit_t l = limit("3", "1/hour");
	sluice_shmstore_t *s = open_store(path, 100);
	struct stat st;
	int i;

	CHECK(s);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
	for (i = 0; i < 3; i++)
		CHECK(sluice_shmstore_take(s, "a", 1, &l, 1, 1, T0, NULL,
					   NULL) == 1);
	sluice_shmstore_close(s);
	s = open_store(path, 100);
	CHECK(s);
	CHECK(sluice_shmstore_take(s, "a", 1, &l, 1, 1, T0 + 1000, NULL,
				   NULL) == 0);
	CHECK(sluice_shmstore_take(s, "b", 1, &l, 1, 1, T0 + 1000, NULL,
				   NULL) == 1);
	sluice_shmstore_close(s);
	unlink(path);
}

/*
 * Eviction is no reset button whatever rates callers choose, on the shared
 * table as on the memory store (max_keys 2,000): a drained rule bucket (5
 * at 5/min) stays drained through 6,000 ad-hoc takes on fresh keys with
 * capacity 1 at 1/day (a day of debt each), ad-hoc buckets being evicted
 * among themselves; the flood holds the bound and its evictions are
 * counted.
 */
static void test_flood_of_slow_adhoc_buckets_resets_no_rule_bucket(void)
{
	static const char victim[] = "check\x1f"
				     "10.0.0.1";
	const char *path = shm_path("adhoc-flood");
	sluice_limit_t rule = limit("5", "5/min"), slow = limit("1", "1/day");
	sluice_shmstore_t *s = open_store(path, 2000);
	sluice_memstore_stats_t st;
	int64_t now = T0;
	char key[40];
	int i, n;

	CHECK(s);
	for (i = 0; i < 6; i++)
		CHECK(sluice_shmstore_take(s, victim, sizeof(victim) - 1, &rule,
					   1, 1, now++, NULL, NULL) == (i < 5));
	for (i = 0; i < 6000; i++) {
		n = snprintf(key, sizeof(key), "%cflood-%d", SLUICE_KEY_ADHOC,
			     i);
		CHECK(sluice_shmstore_take(s, key, (size_t)n, &slow, 1, 1,
					   now++, NULL, NULL) == 1);
	}
	CHECK(sluice_shmstore_take(s, victim, sizeof(victim) - 1, &rule, 1, 1,
				   now++, NULL, NULL) == 0);
	sluice_shmstore_stats(s, &st);
	CHECK(st.keys <= 2000);
	CHECK(st.evicted_lossy >= 4000);
	sluice_shmstore_close(s);
	unlink(path);
}

int main(void)
{
	RUN(test_decides_as_the_memory_store);
	RUN(test_reopened_store_keeps_a_drained_bucket);
	RUN(test_flood_of_slow_adhoc_buckets_resets_no_rule_bucket);
	RUN(test_four_processes_share_one_bucket_exactly);
	RUN(test_memory_store_per_process_overruns_fourfold);
	RUN(test_sigkilled_process_blocks_no_one_and_corrupts_nothing);
	TESTS_DONE();
}
