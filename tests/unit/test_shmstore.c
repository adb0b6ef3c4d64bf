/*
 * test_shmstore.c -- the shared-memory store: processes on one file share
 * buckets exactly, a process SIGKILLed at any instruction blocks no one and
 * corrupts nothing, files of another layout are refused, and every
 * handle and process on one file names a key's buckets alike (with the
 * file's key hash: AES where the processor has it), or refuses the file.
 */
#include "check.h"
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

static const int64_t T0 = 1764500000000000LL;

static sluice_limit_t limit(const char *cap, const char *rate)
{
	sluice_limit_t l;
	char err[256];

	if (sluice_limit_parse(&l, cap, rate, err, sizeof(err)) != 0) {
		fprintf(stderr, "%s\n", err);
		abort();
	}
	return l;
}

/* A fresh file name under /dev/shm for this test run. */
static const char *shm_path(const char *what)
{
	static char path[128];

	snprintf(path, sizeof(path), "/dev/shm/sluice-test-%d-%s", getpid(),
		 what);
	unlink(path);
	return path;
}

static sluice_shmstore_t *open_store(const char *path, size_t max_keys)
{
	sluice_shmstore_t *s = NULL;
	char err[256];

	if (sluice_shmstore_open(&s, path, max_keys, err, sizeof(err)) != 0)
		fprintf(stderr, "open: %s\n", err);
	return s;
}

static int64_t mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

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

/* ------------------------------------------------- a filesystem too small */

static int open_err(const char *path, size_t max_keys, char *err,
		    size_t errlen);

/* A tmpfs of 1 MiB of our own (mounted for the test, as root), or NULL
 * with the reason on stderr. */
static const char *small_fs(void)
{
	static char dir[64];

	snprintf(dir, sizeof(dir), "/tmp/sluice-test-%d-small", getpid());
	if (mkdir(dir, 0700) != 0 && errno != EEXIST)
		return NULL;
	if (mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NODEV,
		  "size=1m,mode=0700") != 0) {
		fprintf(stderr, "skip: cannot mount a tmpfs on %s: %s\n", dir,
			strerror(errno));
		rmdir(dir);
		return NULL;
	}
	return dir;
}

static void small_fs_gone(const char *dir)
{
	umount2(dir, MNT_DETACH);
	rmdir(dir);
}

static unsigned long long free_bytes(const char *dir)
{
	struct statvfs v;

	return statvfs(dir, &v) == 0
		       ? (unsigned long long)v.f_bfree * v.f_frsize
		       : 0;
}

/*
 * A store that does not fit its filesystem (max_keys 1,000,000: about 50
 * MB, on a 1 MiB tmpfs) is refused with a message that says what it needs,
 * what is free and where to put it; the file it created is removed and
 * every block is free again (a failed reservation once kept them all, so
 * the disk stayed full and every restart tried again).  A store that fits
 * is then made there as usual.  An empty file someone else made (an
 * unfinished store) is left where it is.
 */
/* The steps of the test below on the mounted dir: 0, or the first step
 * that failed (the caller unmounts whatever happens, then checks). */
static int too_big_steps(const char *dir)
{
	char path[128], err[512];
	unsigned long long before = free_bytes(dir);
	sluice_shmstore_t *s;
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/store", dir);
	if (before == 0)
		return 1;
	if (open_err(path, 1000000, err, sizeof(err)) != SLUICE_ESTORE)
		return 2;
	fprintf(stderr, "     refused: %s\n", err);
	if (!strstr(err, path) || !strstr(err, "free") ||
	    !strstr(err, "/dev/shm"))
		return 3;
	if (stat(path, &st) == 0 || errno != ENOENT)
		return 4; /* the file it created is gone */
	if (free_bytes(dir) != before)
		return 5; /* and so is every block */

	/* An empty file of ours that another process made stays. */
	fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
	if (fd < 0)
		return 6;
	close(fd);
	if (open_err(path, 1000000, err, sizeof(err)) != SLUICE_ESTORE)
		return 7;
	if (stat(path, &st) != 0 || st.st_size != 0)
		return 8;
	if (free_bytes(dir) != before)
		return 9;
	unlink(path);

	s = open_store(path, 1000); /* one that fits */
	if (!s)
		return 10;
	sluice_shmstore_close(s);
	unlink(path);
	return 0;
}

static void test_store_too_big_for_its_filesystem_is_refused_and_removed(void)
{
	const char *dir = small_fs();
	int failed;

	if (!dir)
		return;
	failed = too_big_steps(dir);
	small_fs_gone(dir);
	CHECK_EQ_U64(failed, 0);
}

/*
 * A reservation that fails after the room was checked (here the process's
 * file size limit, RLIMIT_FSIZE: the same path as ENOSPC from a disk that
 * filled meanwhile) leaves no file behind either.  In a child, whose
 * limit dies with it.
 */
static void test_failed_reservation_leaves_no_file(void)
{
	const char *path = shm_path("fsize");
	struct rlimit r = {64 << 10, 64 << 10};
	struct stat st;
	pid_t pid;
	int status;

	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		char err[512];

		signal(SIGXFSZ, SIG_IGN);
		if (setrlimit(RLIMIT_FSIZE, &r) != 0)
			_exit(2);
		_exit(open_err(path, 100000, err, sizeof(err)) ==
					      SLUICE_ESTORE &&
				      strstr(err, "/dev/shm")
			      ? 0
			      : 1);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(stat(path, &st) != 0 && errno == ENOENT);
	unlink(path);
}

/* ---------------------------------------------------- refused files */

static int open_err(const char *path, size_t max_keys, char *err, size_t errlen)
{
	sluice_shmstore_t *s = NULL;
	int rc = sluice_shmstore_open(&s, path, max_keys, err, errlen);

	if (rc == 0)
		sluice_shmstore_close(s);
	else if (s)
		rc = 99; /* a failed open must not hand out a store */
	return rc;
}

static int patch(const char *path, off_t at, const void *bytes, size_t n)
{
	int fd = open(path, O_WRONLY);
	int ok = fd >= 0 && pwrite(fd, bytes, n, at) == (ssize_t)n;

	if (fd >= 0)
		close(fd);
	return ok ? 0 : -1;
}

static void test_files_of_another_layout_are_refused(void)
{
	const char *path = shm_path("layout");
	sluice_shmstore_t *s = open_store(path, 1000);
	uint32_t version = 999;
	struct stat st;
	char err[256];
	int fd;

	CHECK(s);
	sluice_shmstore_close(s);
	/* Another max_keys. */
	CHECK(open_err(path, 2000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "max_keys 1000") && strstr(err, path));
	/* Truncated. */
	CHECK(stat(path, &st) == 0);
	CHECK(truncate(path, st.st_size - 4096) == 0);
	CHECK(open_err(path, 1000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "truncated"));
	CHECK(truncate(path, st.st_size) == 0);
	CHECK(open_err(path, 1000, err, sizeof(err)) == 0);
	/* A file of an earlier layout (version 1: the table counters in
	 * another order) is refused, not misread (version 2 is read:
	 * test_version_2_file_keeps_its_buckets). */
	CHECK(patch(path, 8, &(uint32_t){1}, sizeof(uint32_t)) == 0);
	CHECK(open_err(path, 1000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "layout version 1, this build reads versions 2 "
			  "and 3") &&
	      strstr(err, path));
	/* Another layout version. */
	CHECK(patch(path, 8, &version, sizeof(version)) == 0);
	CHECK(open_err(path, 1000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "layout version 999"));
	/* Not a store at all. */
	CHECK(patch(path, 0, "GARBAGE!", 8) == 0);
	CHECK(open_err(path, 1000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "not a sluice shared store"));
	/* Too small to hold a header. */
	CHECK(truncate(path, 0) == 0);
	fd = open(path, O_WRONLY);
	CHECK(fd >= 0 && write(fd, "x", 1) == 1);
	close(fd);
	CHECK(open_err(path, 1000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "too small"));
	unlink(path);
	/* Nowhere to create it; bad arguments. */
	CHECK(open_err("/nonexistent-dir/sluice", 10, err, sizeof(err)) ==
	      SLUICE_ESTORE);
	CHECK(strstr(err, "No such file"));
	CHECK(open_err(path, 0, err, sizeof(err)) == SLUICE_ERANGE);
	CHECK(open_err("", 10, err, sizeof(err)) == SLUICE_EINVAL);
	CHECK(open_err("/dev/shm", 10, err, sizeof(err)) == SLUICE_ESTORE);
	/* A file anyone may write (and so fill with chosen buckets). */
	s = open_store(path, 1000);
	CHECK(s);
	sluice_shmstore_close(s);
	CHECK(chmod(path, 0666) == 0);
	CHECK(open_err(path, 1000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "writable by every user"));
	unlink(path);
}

/* ------------------------------------------------------ the key hash */

/* Where the header keeps the file's key hash (shm_file.c): 1 SipHash,
 * 2 AES for keys of up to 16 bytes. */
#define HASH_AT 72

/* 1 when this processor (and build) computes the AES hash. */
static int have_aes(void)
{
	sluice_aeshash_t a;
	uint8_t k[32] = {0};

	return sluice_aeshash_init(&a, k) == 0;
}

#define NKEYS 300

/* 1 when key i repeats an earlier one. */
static int repeated(uint8_t keys[NKEYS][40], const size_t *lens, size_t i)
{
	size_t j;

	for (j = 0; j < i; j++)
		if (lens[j] == lens[i] && !memcmp(keys[j], keys[i], lens[i]))
			return 1;
	return 0;
}

/* NKEYS distinct keys of 0 to 40 bytes (every length the AES hash takes,
 * and longer ones that keep SipHash), zero bytes included. */
static void make_keys(uint8_t keys[NKEYS][40], size_t *lens, uint64_t seed)
{
	size_t i, j;
	int tries;

	for (i = 0; i < NKEYS; i++) {
		lens[i] = i % 41;
		for (tries = 0; tries < 100; tries++) {
			for (j = 0; j < 40; j++) {
				uint64_t r = test_rand(&seed);

				keys[i][j] = r % 4 == 0 ? 0 : (uint8_t)(r >> 8);
			}
			if (!repeated(keys, lens, i))
				break;
			lens[i] = 1 + (lens[i] + 1) % 40; /* 0 is taken */
		}
		CHECK(!repeated(keys, lens, i));
	}
}

/* Drains (3 of a capacity of 3) keys from .. to - 1 through s; 0 if every
 * take went as expected. */
static int drain_keys(sluice_shmstore_t *s, uint8_t keys[NKEYS][40],
		      const size_t *lens, size_t from, size_t to)
{
	sluice_limit_t l = limit("3", "1/hour");
	size_t i;

	for (i = from; i < to; i++)
		if (sluice_shmstore_take(s, keys[i], lens[i], &l, 1, 3, T0,
					 NULL, NULL) != 1)
			return -1;
	return 0;
}

/* The number of keys from .. to - 1 whose bucket s finds empty. */
static size_t drained(sluice_shmstore_t *s, uint8_t keys[NKEYS][40],
		      const size_t *lens, size_t from, size_t to)
{
	sluice_limit_t l = limit("3", "1/hour");
	size_t i, n = 0;

	for (i = from; i < to; i++)
		n += sluice_shmstore_peek(s, keys[i], lens[i], &l, 1, 1,
					  T0 + 1000, NULL, NULL) == 0;
	return n;
}

/* A file made here hashes with AES exactly when this processor has it;
 * two handles on it find each other's buckets for keys of every length
 * (one bucket per key: the file holds NKEYS of them, not more). */
static void test_two_handles_name_keys_alike(void)
{
	const char *path = shm_path("handles");
	sluice_shmstore_t *a = open_store(path, 1000);
	sluice_shmstore_t *b = open_store(path, 1000);
	static uint8_t keys[NKEYS][40];
	size_t lens[NKEYS];
	sluice_memstore_stats_t st;

	CHECK(a && b);
	make_keys(keys, lens, 11);
	CHECK(strcmp(sluice_shmstore__hash(a),
		     have_aes() ? "aes" : "siphash") == 0);
	CHECK(strcmp(sluice_shmstore__hash(b), sluice_shmstore__hash(a)) == 0);
	CHECK(drain_keys(a, keys, lens, 0, NKEYS / 2) == 0);
	CHECK(drain_keys(b, keys, lens, NKEYS / 2, NKEYS) == 0);
	CHECK(drained(b, keys, lens, 0, NKEYS) == NKEYS);
	CHECK(drained(a, keys, lens, 0, NKEYS) == NKEYS);
	sluice_shmstore_stats(a, &st);
	CHECK_EQ_U64(st.keys, NKEYS);
	sluice_shmstore_close(a);
	sluice_shmstore_close(b);
	unlink(path);
}

/* The same between processes: a child opens the file this process made,
 * finds the buckets drained here, drains the others, and this process
 * finds those; NKEYS buckets in all. */
static void test_two_processes_name_keys_alike(void)
{
	const char *path = shm_path("procs");
	sluice_shmstore_t *s = open_store(path, 1000);
	static uint8_t keys[NKEYS][40];
	size_t lens[NKEYS];
	sluice_memstore_stats_t st;
	pid_t pid;
	int status = -1;

	CHECK(s);
	make_keys(keys, lens, 12);
	CHECK(drain_keys(s, keys, lens, 0, NKEYS / 2) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		sluice_shmstore_t *c = open_store(path, 1000);

		if (!c || strcmp(sluice_shmstore__hash(c),
				 have_aes() ? "aes" : "siphash") != 0)
			_exit(2);
		if (drained(c, keys, lens, 0, NKEYS / 2) != NKEYS / 2 ||
		    drained(c, keys, lens, NKEYS / 2, NKEYS) != 0)
			_exit(3);
		if (drain_keys(c, keys, lens, NKEYS / 2, NKEYS) != 0)
			_exit(4);
		sluice_shmstore_close(c);
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(drained(s, keys, lens, 0, NKEYS) == NKEYS);
	sluice_shmstore_stats(s, &st);
	CHECK_EQ_U64(st.keys, NKEYS);
	sluice_shmstore_close(s);
	unlink(path);
}

/*
 * A file of layout version 2 (the same layout without a hash kind: every
 * key SipHash) is read as it is, SipHash, so that an upgrade keeps its
 * buckets (and processes of the old build share them meanwhile) instead
 * of refusing to start or refilling every bucket; one whose hash fields
 * are not zero, as version 2 left them, is damaged and refused.
 */
static void test_version_2_file_keeps_its_buckets(void)
{
	const char *path = shm_path("v2");
	sluice_limit_t l = limit("3", "1/hour");
	sluice_shmstore_t *s;
	uint8_t zero[40] = {0};
	char err[256];
	int i;

	/* A version 2 file as its build made it: SipHash, hash fields 0. */
	sluice_shmstore__set_no_aes(1);
	s = open_store(path, 100);
	sluice_shmstore__set_no_aes(0);
	CHECK(s);
	for (i = 0; i < 3; i++)
		CHECK(sluice_shmstore_take(s, "drained", 7, &l, 1, 1, T0, NULL,
					   NULL) == 1);
	sluice_shmstore_close(s);
	CHECK(patch(path, 8, &(uint32_t){2}, sizeof(uint32_t)) == 0);
	CHECK(patch(path, HASH_AT, zero, sizeof(zero)) == 0);

	s = open_store(path, 100);
	CHECK(s && strcmp(sluice_shmstore__hash(s), "siphash") == 0);
	CHECK(sluice_shmstore_take(s, "drained", 7, &l, 1, 1, T0 + 1000, NULL,
				   NULL) == 0);
	CHECK(sluice_shmstore_take(s, "fresh", 5, &l, 1, 1, T0 + 1000, NULL,
				   NULL) == 1);
	sluice_shmstore_close(s);

	CHECK(patch(path, HASH_AT, &(uint32_t){2}, sizeof(uint32_t)) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, path) && strstr(err, "version 2 with a key hash"));
	unlink(path);
}

/* A file whose hash this process cannot compute is refused with the
 * reason, never opened with another hash: a file that hashes with AES
 * where AES is refused (the test hook stands in for a processor or build
 * without it), and a hash kind this build does not know. */
static void test_file_with_a_hash_it_cannot_compute_is_refused(void)
{
	const char *path = shm_path("hash");
	sluice_shmstore_t *s = open_store(path, 100);
	uint32_t kind = 2;
	char err[512];

	CHECK(s);
	sluice_shmstore_close(s);
	/* Made here: AES when this processor has it; patched to AES
	 * otherwise, so that the refusal is checked everywhere. */
	if (!have_aes())
		CHECK(patch(path, HASH_AT, &kind, sizeof(kind)) == 0);
	sluice_shmstore__set_no_aes(1);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, path) && strstr(err, "AES-128") &&
	      strstr(err, "refused"));
	/* Files made without AES hash with SipHash, and open everywhere. */
	unlink(path);
	s = open_store(path, 100);
	CHECK(s && strcmp(sluice_shmstore__hash(s), "siphash") == 0);
	sluice_shmstore_close(s);
	sluice_shmstore__set_no_aes(0);
	s = open_store(path, 100);
	CHECK(s && strcmp(sluice_shmstore__hash(s), "siphash") == 0);
	sluice_shmstore_close(s);
	/* Unknown kinds. */
	kind = 77;
	CHECK(patch(path, HASH_AT, &kind, sizeof(kind)) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, path) && strstr(err, "hash kind 77"));
	kind = 0;
	CHECK(patch(path, HASH_AT, &kind, sizeof(kind)) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "hash kind 0"));
	kind = 1;
	CHECK(patch(path, HASH_AT, &kind, sizeof(kind)) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == 0);
	unlink(path);
}

/* ------------------------------------------------ who else is on the host */

#define NOBODY 65534

/* The file another local user made (or chowned) is theirs: refused, and
 * the message names them, whether or not it is laid out already. */
static void test_file_of_another_user_is_refused_naming_the_owner(void)
{
	const char *path = shm_path("owner");
	sluice_shmstore_t *s = open_store(path, 100);
	char err[512];
	int fd;

	CHECK(s);
	sluice_shmstore_close(s);
	CHECK(chown(path, NOBODY, NOBODY) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "owned by uid 65534") != NULL);
	CHECK(strstr(err, path) != NULL);
	/* pre-created empty, mode 0600, before we ever ran */
	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0 && fchown(fd, NOBODY, NOBODY) == 0);
	close(fd);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "owned by uid 65534") != NULL);
	/* a symbolic link planted in its place */
	unlink(path);
	CHECK(symlink("/etc/passwd", path) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "symbolic link") != NULL);
	unlink(path);
	/* our own file, group-writable for a group nobody configured */
	s = open_store(path, 100);
	CHECK(s);
	sluice_shmstore_close(s);
	CHECK(chmod(path, 0660) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "not the configured group") != NULL);
	unlink(path);
}

/* With a configured group, a file carrying it is shared by its members
 * (another user's file included); one this call creates gets it, 0660. */
static void test_configured_group_shares_the_file(void)
{
	const char *path = shm_path("group");
	sluice_shmstore_t *s = NULL;
	struct group *g = getgrgid(NOBODY);
	const char *gname = g ? g->gr_name : "65534";
	char err[512];
	struct stat st;

	CHECK(sluice_shmstore_open_group(&s, path, 100, gname, err,
					 sizeof(err)) == 0);
	sluice_shmstore_close(s);
	CHECK(stat(path, &st) == 0);
	CHECK(st.st_gid == NOBODY && (st.st_mode & 0777) == 0660);
	CHECK(chown(path, NOBODY, NOBODY) == 0);
	s = NULL;
	CHECK(sluice_shmstore_open_group(&s, path, 100, gname, err,
					 sizeof(err)) == 0);
	sluice_shmstore_close(s);
	/* without the group it is another user's file */
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(sluice_shmstore_open_group(&s, path, 100, "no-such-group-x", err,
					 sizeof(err)) == SLUICE_EINVAL);
	CHECK(strstr(err, "no-such-group-x") != NULL);
	unlink(path);
}

/* A directory others may write without the sticky bit lets them swap
 * the file: refused.  With the sticky bit (as /dev/shm) it is fine. */
static void test_directory_others_can_write_is_refused(void)
{
	char dir[] = "/dev/shm/sluice-test-dir-XXXXXX", path[128], err[512];

	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/store", dir);
	CHECK(chmod(dir, 0777) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "without the sticky bit") != NULL);
	CHECK(chmod(dir, 01777) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == 0);
	CHECK(chmod(dir, 0755) == 0);
	CHECK(chown(dir, NOBODY, NOBODY) == 0);
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "directory is owned by uid 65534") != NULL);
	unlink(path);
	rmdir(dir);
}

/* ----------------------------------------------- a damaged or shrunk file */

/* Where shard i's table counters sit in the file (the layout shm_file.c
 * writes: a 4096-byte header, then 128-byte-aligned shards). */
typedef struct {
	pthread_mutex_t lock;
	sluice_table_t t;
} __attribute__((aligned(128))) test_shard_t;

static off_t shard_at(size_t i, size_t field)
{
	return (off_t)(4096 + i * sizeof(test_shard_t) +
		       offsetof(test_shard_t, t) + field);
}

/* truncate(1) on a live file: every call fails with SLUICE_ESTORE (no
 * SIGBUS), says so, and the file is refused when opened again. */
static void test_file_truncated_while_open_fails_calls_not_the_process(void)
{
	const char *path = shm_path("shrunk");
	sluice_limit_t l = limit("10", "1/s");
	sluice_shmstore_t *s = open_store(path, 1000);
	sluice_memstore_stats_t st;
	sluice_take_item_t it = {
		.key = "b", .keylen = 1, .limits = &l, .nlimits = 1, .cost = 1};
	char err[512];
	int i;

	CHECK(s);
	CHECK(sluice_shmstore_take(s, "a", 1, &l, 1, 1, T0, NULL, NULL) == 1);
	CHECK(truncate(path, 4096) == 0);
	/* every key, so every shard is touched */
	for (i = 0; i < 200; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		CHECK(sluice_shmstore_take(s, key, strlen(key), &l, 1, 1, T0,
					   NULL, NULL) == SLUICE_ESTORE);
	}
	CHECK(sluice_shmstore__failed(s));
	CHECK(sluice_shmstore_take_many(s, &it, 1, T0) == SLUICE_ESTORE);
	CHECK(sluice_shmstore_reset(s, "a", 1, &l, 1) == SLUICE_ESTORE);
	CHECK(sluice_shmstore_refund(s, "a", 1, &l, 1, 1, T0) == SLUICE_ESTORE);
	sluice_shmstore_stats(s, &st);
	CHECK(st.keys == 0);
	CHECK(sluice_shmstore_check(s, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "shrank") != NULL);
	sluice_shmstore_close(s);
	CHECK(open_err(path, 1000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "truncated") != NULL);
	unlink(path);
}

/* Shrunk to the middle of the slots, while this process holds no lock:
 * the fault comes with a shard's lock held; that lock is released, so
 * another process is not left waiting on it. */
static void test_fault_releases_the_lock_it_held(void)
{
	const char *path = shm_path("shrunk-mid");
	sluice_limit_t l = limit("10", "1/s");
	sluice_shmstore_t *s = open_store(path, 100000), *t;
	struct stat st;
	int i, failed = 0;

	CHECK(s);
	CHECK(stat(path, &st) == 0);
	/* keep the header and every shard's lock, cut the slots */
	CHECK(truncate(path, 4096 + 64 * 128 + 4096) == 0);
	for (i = 0; i < 2000; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		failed += sluice_shmstore_take(s, key, strlen(key), &l, 1, 1,
					       T0, NULL, NULL) == SLUICE_ESTORE;
	}
	CHECK(failed > 0);
	/* another opener of the same (restored) file takes every lock */
	CHECK(truncate(path, st.st_size) == 0);
	sluice_shmstore_close(s);
	t = open_store(path, 100000);
	CHECK(t);
	sluice_shmstore__set_lock_wait(t, 200);
	CHECK(sluice_shmstore_check(t, NULL, 0) == 0);
	sluice_shmstore_close(t);
	unlink(path);
}

/* Values written into the counters of a live file (a mask far beyond the
 * slots, a count above the bound, a hand out of range) crash no call;
 * the damaged file is refused at the next open, with a message. */
static void test_damaged_counters_crash_nothing_and_are_refused(void)
{
	const char *path = shm_path("damaged");
	sluice_limit_t l = limit("10", "1/s");
	sluice_shmstore_t *s = open_store(path, 1000);
	uint64_t huge = UINT64_C(0x7fffffffffffffff);
	char err[512];
	int i;

	CHECK(s);
	for (i = 0; i < 64; i++) {
		CHECK(patch(path,
			    shard_at((size_t)i, offsetof(sluice_table_t, mask)),
			    &huge, 8) == 0);
		CHECK(patch(path,
			    shard_at((size_t)i, offsetof(sluice_table_t, hand)),
			    &huge, 8) == 0);
		CHECK(patch(path,
			    shard_at((size_t)i,
				     offsetof(sluice_table_t, cursor)),
			    &huge, 8) == 0);
	}
	for (i = 0; i < 500; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		CHECK(sluice_shmstore_take(s, key, strlen(key), &l, 1, 1, T0,
					   NULL, NULL) >= 0);
		CHECK(sluice_shmstore_reset(s, key, strlen(key), &l, 1) == 0);
	}
	sluice_shmstore_close(s);
	CHECK(open_err(path, 1000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "shard 0 is damaged") != NULL);
	unlink(path);
}

/* Every slot of the file marked used: lookups and inserts end (bounded
 * probes), decisions still come. */
static void test_table_filled_by_hand_does_not_hang(void)
{
	const char *path = shm_path("full");
	sluice_limit_t l = limit("10", "1/s");
	sluice_shmstore_t *s = open_store(path, 100);
	struct stat st;
	char err[512];
	off_t at;
	int fd, i;

	CHECK(s);
	CHECK(stat(path, &st) == 0);
	fd = open(path, O_WRONLY);
	CHECK(fd >= 0);
	/* the slots follow the shards: fill them with "used" entries */
	for (at = 4096 + 2 * 128; at + 24 <= st.st_size; at += 24) {
		uint64_t slot[3] = {(uint64_t)at, 1, 0};

		CHECK(pwrite(fd, slot, sizeof(slot), at) == sizeof(slot));
	}
	close(fd);
	for (i = 0; i < 50; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		CHECK(sluice_shmstore_take(s, key, strlen(key), &l, 1, 1, T0,
					   NULL, NULL) >= 0);
	}
	sluice_shmstore_close(s);
	/* more entries than a shard may hold: no crash left that */
	CHECK(open_err(path, 100, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "damaged") != NULL);
	unlink(path);
}

/* A lock word naming a thread that will never unlock (here: this very
 * thread, as a damaged file could): the call fails after the wait. */
static void test_lock_never_released_fails_the_call(void)
{
	const char *path = shm_path("stuck");
	sluice_limit_t l = limit("10", "1/s");
	sluice_shmstore_t *s = open_store(path, 100);
	uint32_t word = 0x3fffffff; /* a thread id no one has */
	int i, failed = 0;

	CHECK(s);
	sluice_shmstore__set_lock_wait(s, 50);
	for (i = 0; i < 2; i++)
		CHECK(patch(path, (off_t)(4096 + i * 128), &word, 4) == 0);
	for (i = 0; i < 4; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		failed += sluice_shmstore_take(s, key, strlen(key), &l, 1, 1,
					       T0, NULL, NULL) == SLUICE_ESTORE;
	}
	CHECK(failed == 4);
	sluice_shmstore_close(s);
	unlink(path);
}

/* 1 when thread `pid` sleeps (state S), in a futex wait where the kernel
 * says so. */
static int sleeping_in_futex(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	int ok = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return 0;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) != NULL)
		ok = p[1] == ' ' && p[2] == 'S';
	fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	if (ok && (f = fopen(path, "r")) != NULL) {
		if (fgets(buf, sizeof(buf), f) && strcmp(buf, "0") != 0)
			ok = strstr(buf, "futex") != NULL;
		fclose(f);
	}
	return ok;
}

/* A holder killed inside pthread_mutex_unlock(), after it cleared the
 * lock word and before it woke the waiter, leaves that waiter asleep on
 * a free lock: no robust-list cleanup wakes it.  Played here by writing
 * the lock word by hand: held (by a thread no one has, with the waiters
 * bit), then, once the waiter sleeps, free without a wake.  The waiter's
 * take must still pass, not fail when its whole wait runs out. */
static void test_lost_wakeup_costs_no_call(void)
{
	const char *path = shm_path("wakeup");
	sluice_limit_t l = limit("10", "1/s");
	sluice_shmstore_t *s = open_store(path, 100);
	uint32_t held = 0x80000000u | 0x3fffffffu, freed = 0;
	int64_t deadline;
	pid_t child;
	int i, status = 0, slept = 0;

	CHECK(s);
	for (i = 0; i < 2; i++)
		CHECK(patch(path, (off_t)(4096 + i * 128), &held, 4) == 0);
	if ((child = fork()) == 0) {
		sluice_shmstore_t *c = open_store(path, 100);

		if (!c)
			_exit(3);
		sluice_shmstore__set_lock_wait(c, 5000);
		_exit(sluice_shmstore_take(c, "a", 1, &l, 1, 1, T0, NULL,
					   NULL) == 1
			      ? 0
			      : 4);
	}
	CHECK(child > 0);
	deadline = mono_us() + 60 * 1000000LL;
	while (!(slept = sleeping_in_futex(child)) && mono_us() < deadline)
		usleep(1000);
	/* Asleep for a moment longer: inside the futex wait for sure. */
	usleep(20000);
	for (i = 0; i < 2; i++)
		CHECK(patch(path, (off_t)(4096 + i * 128), &freed, 4) == 0);
	CHECK(waitpid(child, &status, 0) == child);
	CHECK(slept);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	sluice_shmstore_close(s);
	unlink(path);
}

#ifdef __GLIBC__
/* A lock's type overwritten in a live file (here: lock elision, which
 * glibc runs with instructions this CPU may lack, and priority
 * inheritance): no call uses such a lock, none crashes, and the file is
 * refused when opened again. */
static void test_lock_type_overwritten_is_not_used(void)
{
	const char *path = shm_path("kind");
	sluice_limit_t l = limit("10", "1/s");
	sluice_shmstore_t *s = open_store(path, 1000);
	sluice_take_item_t it = {
		.key = "b", .keylen = 1, .limits = &l, .nlimits = 1, .cost = 1};
	sluice_memstore_stats_t st;
	const int kinds[2] = {256 /* timed, elision */, 32 | 16 /* PI */};
	char err[512];
	int i, k;

	CHECK(s);
	for (k = 0; k < 2; k++) {
		for (i = 0; i < 64; i++)
			CHECK(patch(path,
				    (off_t)(4096 + i * sizeof(test_shard_t) +
					    offsetof(pthread_mutex_t,
						     __data.__kind)),
				    &kinds[k], sizeof(int)) == 0);
		for (i = 0; i < 100; i++) {
			char key[16];

			snprintf(key, sizeof(key), "k%d", i);
			CHECK(sluice_shmstore_take(s, key, strlen(key), &l, 1,
						   1, T0, NULL,
						   NULL) == SLUICE_ESTORE);
		}
		CHECK(sluice_shmstore_take_many(s, &it, 1, T0) ==
		      SLUICE_ESTORE);
		CHECK(sluice_shmstore_reset(s, "b", 1, &l, 1) == SLUICE_ESTORE);
		sluice_shmstore_stats(s, &st);
		CHECK(sluice_shmstore_check(s, err, sizeof(err)) != 0);
	}
	sluice_shmstore_close(s);
	CHECK(open_err(path, 1000, err, sizeof(err)) == SLUICE_ESTORE);
	CHECK(strstr(err, "lock is damaged") != NULL);
	unlink(path);
}
#endif

/* A file without its magic was left by a creator that died midway: the
 * next opener lays it out again. */
static void test_unfinished_file_is_laid_out_again(void)
{
	const char *path = shm_path("unfinished");
	sluice_shmstore_t *s = open_store(path, 100);
	sluice_limit_t l = limit("1", "1/hour");

	CHECK(s);
	sluice_shmstore_close(s);
	CHECK(patch(path, 0, "\0\0\0\0\0\0\0\0", 8) == 0);
	s = open_store(path, 100);
	CHECK(s);
	CHECK(sluice_shmstore_take(s, "a", 1, &l, 1, 1, T0, NULL, NULL) == 1);
	sluice_shmstore_close(s);
	unlink(path);
}

int main(void)
{
	RUN(test_decides_as_the_memory_store);
	RUN(test_reopened_store_keeps_a_drained_bucket);
	RUN(test_flood_of_slow_adhoc_buckets_resets_no_rule_bucket);
	RUN(test_files_of_another_layout_are_refused);
	RUN(test_unfinished_file_is_laid_out_again);
	RUN(test_two_handles_name_keys_alike);
	RUN(test_two_processes_name_keys_alike);
	RUN(test_file_with_a_hash_it_cannot_compute_is_refused);
	RUN(test_version_2_file_keeps_its_buckets);
	RUN(test_failed_reservation_leaves_no_file);
	if (geteuid() == 0) /* it mounts a tmpfs */
		RUN(test_store_too_big_for_its_filesystem_is_refused_and_removed);
	else
		fprintf(stderr, "skip: test_store_too_big_for_its_filesystem_"
				"is_refused_and_removed mounts a tmpfs: not "
				"root\n");
	if (geteuid() == 0) { /* they chown to nobody */
		RUN(test_file_of_another_user_is_refused_naming_the_owner);
		RUN(test_configured_group_shares_the_file);
		RUN(test_directory_others_can_write_is_refused);
	}
	RUN(test_file_truncated_while_open_fails_calls_not_the_process);
	RUN(test_fault_releases_the_lock_it_held);
	RUN(test_damaged_counters_crash_nothing_and_are_refused);
	RUN(test_table_filled_by_hand_does_not_hang);
	RUN(test_lock_never_released_fails_the_call);
	RUN(test_lost_wakeup_costs_no_call);
#ifdef __GLIBC__
	RUN(test_lock_type_overwritten_is_not_used);
#endif
	RUN(test_four_processes_share_one_bucket_exactly);
	RUN(test_memory_store_per_process_overruns_fourfold);
	RUN(test_sigkilled_process_blocks_no_one_and_corrupts_nothing);
	TESTS_DONE();
}
