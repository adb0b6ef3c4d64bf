/*
 * test_shmstore_files.c -- the shared-memory store's file: one too big for
 * its filesystem is refused and removed, files of another layout are
 * refused, every handle and process on one file names a key's buckets
 * alike (with the file's key hash: AES where the processor has it) or
 * refuses the file, and a file another local user could write is refused.
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

/* ------------------------------------------------- a filesystem too small */

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

int main(void)
{
	RUN(test_files_of_another_layout_are_refused);
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
	TESTS_DONE();
}
