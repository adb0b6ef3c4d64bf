/*
 * shm.c -- the shared-memory store: the bucket table of buckets.c in a file
 * on a tmpfs (/dev/shm), mapped by every process of a host that opens it,
 * so they all charge the same buckets and a restarted process finds them.
 *
 * File layout (little-endian, this machine's ABI):
 *
 *   [0, 4096)       the header: magic, layout version, the parameters the
 *                   layout derives from, the SipHash key, the ABI sizes
 *   [4096, ...)     one shard_t per shard: a robust process-shared mutex
 *                   and the table counters, each on its own cache lines
 *   then            every shard's slot array, fixed at creation, sized for
 *                   its share of max_keys (never more than 3/4 full)
 *
 * The hash key is drawn at random when the file is created and lives in
 * the file (mode 0600): clients cannot predict which keys collide, and
 * every process that opens the file hashes alike.
 *
 * Creation and opening happen under flock(LOCK_EX) on the file, which the
 * kernel releases if its holder dies: a creator killed midway leaves a file
 * without its magic, which the next opener initialises again.  The magic
 * is written last.  A file whose header does not match what this build
 * would lay out for max_keys is refused, never reinterpreted.
 *
 * Each shard's lock is PTHREAD_MUTEX_ROBUST: if a process dies holding it,
 * the next locker is told so (EOWNERDEAD), repairs the shard's table in
 * place (sluice_shard_repair(), itself safe to kill midway) and marks the
 * lock consistent, so nobody is ever left waiting on a dead process.
 *
 * Who else is on the host.  Whoever can write the file can read the hash
 * key and rewrite any bucket, so the file must be this user's (or root's,
 * or carry the configured group) and writable by no one else, and its
 * directory must not let others swap it: a directory others may write is
 * accepted only with the sticky bit (/dev/shm, /tmp), where only a file's
 * owner may remove or rename it, so a file there that passes the owner
 * check is ours.  An existing name is opened without O_CREAT (and a
 * missing one created with O_EXCL), without following a symbolic link,
 * without blocking.
 *
 * The file's content is never trusted.  The layout comes from max_keys,
 * never from the header; every index read from the file (a shard's hand,
 * cursor) is masked with the size this process computed, every probe is
 * bounded, and a shard's counters are checked at open (a damaged file is
 * refused, with a message).  What the file can still do while mapped --
 * shrink (SIGBUS on the next access) -- is caught: every call runs under
 * a guard that turns a SIGBUS inside this mapping into SLUICE_ESTORE, and
 * the store stays failed (its message says why) until it is opened again.
 * A lock that is not released (a stopped process, a damaged lock word) is
 * waited on for at most SHM_LOCK_WAIT_MS, then the call fails.
 */
#include "store/shm.h"
#include "util/errmsg.h"
#include "util/file.h"
#include "util/siphash.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_MAGIC "SLUICESH"
/* 2: the table counters that move on every take (cursor, count) moved
 * into the lock's cache line.  A file of another version is refused. */
#define SHM_VERSION  2u
#define SHM_HEADER   4096u
#define SHM_MAX_KEYS (UINT64_C(1) << 32)
/* A lock held longer than this (by a stopped process, or a damaged lock
 * word naming no live thread) fails the call instead of hanging it.  Far
 * above any real critical section (microseconds) even on a host so
 * oversubscribed that a holder waits seconds for a CPU: a live holder
 * must not make calls fail. */
#define SHM_LOCK_WAIT_MS 10000u

typedef struct header_s {
	char magic[8];
	uint32_t version;
	uint32_t header_bytes;
	uint64_t file_bytes;
	uint64_t max_keys;
	uint64_t nshards;
	uint64_t slots_per_shard;
	uint32_t shard_bytes; /* sizeof(shard_t): the mutex ABI */
	uint32_t slot_bytes;
	uint8_t seed[16];
} header_t;

typedef struct shard_s {
	pthread_mutex_t lock;
	sluice_table_t t;
} __attribute__((aligned(128))) shard_t;

struct sluice_shmstore_s {
	sluice_buckets_t b;
	void *map;
	size_t map_bytes;
	uint8_t seed[16]; /* the file's hash key, copied at open */
	const char *path;
	int broken; /* a SIGBUS on the mapping: every call fails */
	sluice_shard_t views[SLUICE_MAX_SHARDS];
};

/* What a store for max_keys looks like in this build. */
static void layout(uint64_t max_keys, header_t *h)
{
	unsigned bits;
	size_t n = sluice_buckets_nshards(max_keys, &bits);
	uint64_t slots = sluice_buckets_fixed_slots(max_keys / n + 1);

	memset(h, 0, sizeof(*h));
	memcpy(h->magic, SHM_MAGIC, sizeof(h->magic));
	h->version = SHM_VERSION;
	h->header_bytes = SHM_HEADER;
	h->max_keys = max_keys;
	h->nshards = n;
	h->slots_per_shard = slots;
	h->shard_bytes = sizeof(shard_t);
	h->slot_bytes = sizeof(sluice_slot_t);
	h->file_bytes = SHM_HEADER + n * sizeof(shard_t) +
			n * slots * sizeof(sluice_slot_t);
}

static int init_locks(shard_t *shards, size_t n)
{
	pthread_mutexattr_t a;
	size_t i;
	int rc;

	if ((rc = pthread_mutexattr_init(&a)) != 0)
		return rc;
	if ((rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED)) ||
	    (rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST)))
		goto out;
	for (i = 0; i < n && !rc; i++)
		rc = pthread_mutex_init(&shards[i].lock, &a);
out:
	pthread_mutexattr_destroy(&a);
	return rc;
}

/* Lays out a new (or unfinished) file; the caller holds the flock. */
static int create(int fd, const char *path, const header_t *want, char *err,
		  size_t errlen)
{
	header_t *h;
	shard_t *shards;
	size_t i;
	int rc;

	if (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)want->file_bytes))
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: cannot size: %s", path,
				   strerror(errno));
	/* Reserve every page now: a full tmpfs then fails here, clearly,
	 * rather than as SIGBUS on some later write. */
	if ((rc = posix_fallocate(fd, 0, (off_t)want->file_bytes)) != 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: cannot reserve %llu bytes: %s", path,
				   (unsigned long long)want->file_bytes,
				   strerror(rc));
	h = mmap(NULL, want->file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		 0);
	if (h == MAP_FAILED)
		return sluice_fail(SLUICE_ESTORE, err, errlen, "%s: mmap: %s",
				   path, strerror(errno));
	shards = (shard_t *)((char *)h + SHM_HEADER);
	*h = *want;
	memset(h->magic, 0, sizeof(h->magic));
	sluice_random_bytes(h->seed, sizeof(h->seed));
	for (i = 0; i < want->nshards; i++) {
		shards[i].t.max = want->max_keys / want->nshards +
				  (i < want->max_keys % want->nshards);
		shards[i].t.mask = want->slots_per_shard - 1;
	}
	rc = init_locks(shards, want->nshards);
	if (rc == 0) { /* the magic last: a file without it is unfinished */
		__atomic_thread_fence(__ATOMIC_RELEASE);
		memcpy(h->magic, want->magic, sizeof(h->magic));
	}
	munmap(h, want->file_bytes);
	if (rc != 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: cannot make robust shared locks: %s",
				   path, strerror(rc));
	return 0;
}

/* Refuses a file this build would not have laid out for max_keys. */
static int validate(const char *path, const header_t *h, off_t size,
		    const header_t *want, char *err, size_t errlen)
{
	if (memcmp(h->magic, SHM_MAGIC, sizeof(h->magic)) != 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: not a sluice shared store (no magic)",
				   path);
	if (h->version != SHM_VERSION)
		return sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: layout version %u, this build reads version "
			"%u (remove the file to start afresh)",
			path, h->version, SHM_VERSION);
	if (h->max_keys != want->max_keys)
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: made for max_keys %llu, asked for %llu "
				   "(remove the file to resize it)",
				   path, (unsigned long long)h->max_keys,
				   (unsigned long long)want->max_keys);
	if (h->header_bytes != want->header_bytes ||
	    h->nshards != want->nshards ||
	    h->slots_per_shard != want->slots_per_shard ||
	    h->shard_bytes != want->shard_bytes ||
	    h->slot_bytes != want->slot_bytes ||
	    h->file_bytes != want->file_bytes)
		return sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: laid out by an incompatible build (shards, "
			"slots or lock size differ)",
			path);
	if ((uint64_t)size != h->file_bytes)
		return sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: %lld bytes, its header says %llu (truncated "
			"or damaged)",
			path, (long long)size,
			(unsigned long long)h->file_bytes);
	return 0;
}

/* glibc's type word of a robust process-shared mutex, which a damaged
 * file could turn into another type (priority inheritance: calls into the
 * kernel with garbage); 0 where unknown (unchecked). */
static int the_lock_kind;
static pthread_once_t kind_once = PTHREAD_ONCE_INIT;

static void find_lock_kind(void)
{
#ifdef __GLIBC__
	pthread_mutexattr_t a;
	pthread_mutex_t m;

	if (pthread_mutexattr_init(&a) != 0)
		return;
	if (!pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) &&
	    !pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) &&
	    !pthread_mutex_init(&m, &a)) {
		the_lock_kind = m.__data.__kind;
		pthread_mutex_destroy(&m);
	}
	pthread_mutexattr_destroy(&a);
#endif
}

static int lock_kind(void)
{
	pthread_once(&kind_once, find_lock_kind);
	return the_lock_kind;
}

/* Refuses a file whose shards this build would not have laid out: the
 * counters every process trusts for sizes, and the locks' type. */
static int validate_shards(const char *path, const void *map,
			   const header_t *want, char *err, size_t errlen)
{
	const shard_t *shards =
		(const shard_t *)((const char *)map + SHM_HEADER);
	int kind = lock_kind();
	size_t i;

	for (i = 0; i < want->nshards; i++) {
		const sluice_table_t *t = &shards[i].t;
		uint64_t max = want->max_keys / want->nshards +
			       (i < want->max_keys % want->nshards);

		if (t->mask != want->slots_per_shard - 1 || t->max != max ||
		    t->count > max || t->hand > t->mask || t->cursor > t->mask)
			return sluice_fail(
				SLUICE_ESTORE, err, errlen,
				"%s: shard %zu is damaged (its table's size, "
				"bound or positions are not what this file "
				"was laid out with); remove the file to start "
				"afresh",
				path, i);
#ifdef __GLIBC__
		if (kind && shards[i].lock.__data.__kind != kind)
			return sluice_fail(SLUICE_ESTORE, err, errlen,
					   "%s: shard %zu's lock is damaged; "
					   "remove the file to start afresh",
					   path, i);
#endif
	}
	(void)kind;
	return 0;
}

/* Under the flock: creates the file's contents if need be, checks them,
 * and maps them. */
static int open_locked(sluice_shmstore_t *s, int fd, const char *path,
		       const header_t *want, char *err, size_t errlen)
{
	header_t h;
	struct stat st;
	ssize_t got;
	int rc;

	if (fstat(fd, &st) != 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen, "%s: %s", path,
				   strerror(errno));
	memset(&h, 0, sizeof(h));
	got = pread(fd, &h, sizeof(h), 0);
	if (got < 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen, "%s: %s", path,
				   strerror(errno));
	if (st.st_size != 0 && (size_t)st.st_size < sizeof(h))
		return sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: %lld bytes, too small to be a sluice shared "
			"store",
			path, (long long)st.st_size);
	/* Empty, or its creator died before writing the magic. */
	if (st.st_size == 0 || !memcmp(h.magic, "\0\0\0\0\0\0\0\0", 8)) {
		if ((rc = create(fd, path, want, err, errlen)) != 0)
			return rc;
		if (fstat(fd, &st) != 0 || pread(fd, &h, sizeof(h), 0) < 0)
			return sluice_fail(SLUICE_ESTORE, err, errlen, "%s: %s",
					   path, strerror(errno));
	}
	if ((rc = validate(path, &h, st.st_size, want, err, errlen)) != 0)
		return rc;
	/* The size this process computed, checked against the file's. */
	s->map_bytes = want->file_bytes;
	s->map = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		      fd, 0);
	if (s->map == MAP_FAILED)
		return sluice_fail(SLUICE_ESTORE, err, errlen, "%s: mmap: %s",
				   path, strerror(errno));
	memcpy(s->seed, h.seed, sizeof(s->seed));
	if ((rc = validate_shards(path, s->map, want, err, errlen)) != 0) {
		munmap(s->map, s->map_bytes);
		return rc;
	}
	return 0;
}

static unsigned default_wait_ms = SHM_LOCK_WAIT_MS;

void sluice_shmstore__set_default_lock_wait(unsigned ms)
{
	default_wait_ms = ms;
}

/* Points this process's views at the mapping, sized from the layout this
 * process computed (never from the file's header). */
static void attach(sluice_shmstore_t *s, const header_t *want)
{
	shard_t *shards = (shard_t *)((char *)s->map + SHM_HEADER);
	sluice_slot_t *slots = (sluice_slot_t *)(shards + want->nshards);
	unsigned bits = (unsigned)__builtin_ctzll(want->nshards);
	size_t i;

	s->b.seed = s->seed;
	s->b.nshards = want->nshards;
	s->b.shift = 64 - bits;
	s->b.max_keys = want->max_keys;
	s->b.shards = s->views;
	for (i = 0; i < want->nshards; i++) {
		s->views[i].lock = &shards[i].lock;
		s->views[i].t = &shards[i].t;
		s->views[i].slots = slots + i * want->slots_per_shard;
		s->views[i].mask = want->slots_per_shard - 1;
		s->views[i].max = want->max_keys / want->nshards +
				  (i < want->max_keys % want->nshards);
		s->views[i].can_grow = 0;
		s->views[i].wait_ms = default_wait_ms;
		s->views[i].lock_kind = lock_kind();
	}
}

/* The group named (a name or a number) as a gid. */
static int group_id(const char *path, const char *group, gid_t *gid, char *err,
		    size_t errlen)
{
	char buf[4096], *end;
	struct group gr, *g = NULL;
	unsigned long n;

	*gid = (gid_t)-1;
	if (!group || !*group)
		return 0;
	if (getgrnam_r(group, &gr, buf, sizeof(buf), &g) == 0 && g) {
		*gid = g->gr_gid;
		return 0;
	}
	n = strtoul(group, &end, 10);
	if (*end || end == group || n >= (gid_t)-1)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "%s: group \"%.64s\" does not exist", path,
				   group);
	*gid = (gid_t)n;
	return 0;
}

/*
 * The directory the file is in: others must not be able to remove or
 * swap the file.  Owned by this user or root, and writable by others only
 * with the sticky bit (then only a file's owner may remove or rename it),
 * or by the configured group.
 */
static int check_dir(const char *path, int dirfd, gid_t group, char *err,
		     size_t errlen)
{
	struct stat st;
	char who[96];

	if (fstat(dirfd, &st) != 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen, "%s: %s", path,
				   strerror(errno));
	if (st.st_uid != geteuid() && st.st_uid != 0)
		return sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: its directory is owned by %s, who could swap "
			"the file; expected a directory of this user or "
			"root (such as /dev/shm)",
			path, sluice_file_user(st.st_uid, who, sizeof(who)));
	if (st.st_mode & S_ISVTX)
		return 0;
	if ((st.st_mode & S_IWOTH) ||
	    ((st.st_mode & S_IWGRP) &&
	     (group == (gid_t)-1 || st.st_gid != group)))
		return sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: its directory is writable by %s (mode %03o) "
			"without the sticky bit, so others could swap the "
			"file; expected chmod o-w,g-w (or +t), or /dev/shm",
			path,
			st.st_mode & S_IWOTH ? "every user"
					     : sluice_file_group(st.st_gid, who,
								 sizeof(who)),
			(unsigned)(st.st_mode & 0777));
	return 0;
}

/* Opens (or creates) the file in its checked directory. */
static int open_file(const char *path, gid_t group, int *fdp, char *err,
		     size_t errlen)
{
	const char *base = strrchr(path, '/');
	char dir[4096], why[256];
	sluice_file_t f;
	int dirfd, rc;

	if (!base) {
		snprintf(dir, sizeof(dir), ".");
		base = path;
	} else if (base == path) {
		snprintf(dir, sizeof(dir), "/");
		base++;
	} else {
		if ((size_t)(base - path) >= sizeof(dir))
			return sluice_fail(SLUICE_EINVAL, err, errlen,
					   "%.200s...: path too long", path);
		memcpy(dir, path, (size_t)(base - path));
		dir[base - path] = '\0';
		base++;
	}
	dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen, "%s: %s: %s",
				   path, dir, strerror(errno));
	if ((rc = check_dir(path, dirfd, group, err, errlen)) != 0) {
		close(dirfd);
		return rc;
	}
	rc = sluice_file_open(&f, dirfd, base,
			      SLUICE_FILE_RDWR | SLUICE_FILE_NOFOLLOW |
				      SLUICE_FILE_OWNED | SLUICE_FILE_CREATE,
			      group, why, sizeof(why));
	close(dirfd);
	if (rc < 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s %s; refusing it (a file another user "
				   "made or may write is not ours to trust: "
				   "remove it, or set store.shared.group)",
				   path, why);
	/* A new file: only we (and the group, when one is configured) may
	 * read the hash key or write a bucket, whatever the umask. */
	if (f.created &&
	    ((group != (gid_t)-1 && fchown(f.fd, (uid_t)-1, group) != 0) ||
	     fchmod(f.fd, group != (gid_t)-1 ? 0660 : 0600) != 0)) {
		rc = sluice_fail(SLUICE_ESTORE, err, errlen,
				 "%s: cannot give it the group or mode: %s",
				 path, strerror(errno));
		unlink(path);
		close(f.fd);
		return rc;
	}
	*fdp = f.fd;
	return 0;
}

/* ------------------------------------------------- faults on the mapping */

/*
 * A file shrunk under a live mapping (truncate, a full tmpfs) faults with
 * SIGBUS on the next access beyond its end.  Every call on the store runs
 * under a guard: this thread's jump buffer and the mapping's range.  The
 * process-wide handler, installed at the first open, jumps back to the
 * guard for a fault in the guarded range and hands any other SIGBUS to
 * the handler that was there before (or the default action), so what
 * other code expects of SIGBUS is unchanged.  SA_NODEFER: the jump leaves
 * the handler without restoring the signal mask (sigsetjmp(, 0) is cheap),
 * so SIGBUS must not be blocked inside it.
 */
static __thread sigjmp_buf *guard_jmp;
static __thread const char *guard_lo, *guard_hi;
static struct sigaction old_bus;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	sigjmp_buf *jb = guard_jmp;
	const char *at = si ? (const char *)si->si_addr : NULL;

	if (jb && at >= guard_lo && at < guard_hi) {
		guard_jmp = NULL;
		siglongjmp(*jb, 1);
	}
	if ((old_bus.sa_flags & SA_SIGINFO) && old_bus.sa_sigaction) {
		old_bus.sa_sigaction(sig, si, uc);
	} else if (old_bus.sa_handler != SIG_DFL &&
		   old_bus.sa_handler != SIG_IGN) {
		old_bus.sa_handler(sig);
	} else {
		/* The default action: the faulting access runs again. */
		signal(SIGBUS, SIG_DFL);
	}
}

static void install_sigbus(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &old_bus);
}

static void guard_on(sluice_shmstore_t *s, sigjmp_buf *jb)
{
	guard_lo = s->map;
	guard_hi = (const char *)s->map + s->map_bytes;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	guard_jmp = jb;
}

static void guard_off(void)
{
	guard_jmp = NULL;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

/*
 * After a fault: this thread releases every shard lock it holds (a robust
 * mutex refuses, with EPERM, to be unlocked by a thread that does not
 * hold it; an unlock that faults is skipped), and the store fails from
 * now on.
 *
 * Then the mapping is replaced, in place, by anonymous memory, and never
 * unmapped.  A lock this thread could not release (its page is gone) is
 * still on the thread's robust list, which glibc and the kernel walk and
 * write through (the next lock of any robust mutex links itself to it):
 * that memory must stay mapped and writable, or some later, unrelated
 * lock would crash.  Any other thread still inside a call on this store
 * reads zeros from then on, which the bounded table code survives.
 */
static int fault(sluice_shmstore_t *s)
{
	sigjmp_buf jb;
	volatile size_t i = 0;

	__atomic_store_n(&s->broken, 1, __ATOMIC_RELAXED);
	if (sigsetjmp(jb, 0))
		i++; /* the unlock of shard i faulted */
	guard_on(s, &jb);
	for (; i < s->b.nshards; i++) {
#ifdef __GLIBC__
		/* Its type back first, as buckets.c's unlock does. */
		if (s->views[i].lock_kind)
			s->views[i].lock->__data.__kind = s->views[i].lock_kind;
#endif
		pthread_mutex_unlock(s->views[i].lock);
	}
	guard_off();
	mmap(s->map, s->map_bytes, PROT_READ | PROT_WRITE,
	     MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return SLUICE_ESTORE;
}

/* Runs `call` (an expression of the store's table) under the guard;
 * SLUICE_ESTORE when the store failed or faults. */
#define GUARDED(s, rc, call)                                                   \
	do {                                                                   \
		sigjmp_buf jb_;                                                \
		if (__atomic_load_n(&(s)->broken, __ATOMIC_RELAXED)) {         \
			(rc) = SLUICE_ESTORE;                                  \
			break;                                                 \
		}                                                              \
		if (sigsetjmp(jb_, 0)) {                                       \
			(rc) = fault(s);                                       \
			break;                                                 \
		}                                                              \
		guard_on((s), &jb_);                                           \
		(rc) = (call);                                                 \
		guard_off();                                                   \
	} while (0)

int sluice_shmstore_open_group(sluice_shmstore_t **out, const char *path,
			       size_t max_keys, const char *group, char *err,
			       size_t errlen)
{
	sluice_shmstore_t *s;
	header_t want;
	char why[256];
	gid_t gid;
	int fd, rc;

	if (!out)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "shared store: out is NULL");
	*out = NULL;
	if (!path || !*path)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "a shared store needs a path");
	if (max_keys == 0 || max_keys > SHM_MAX_KEYS)
		return sluice_fail(SLUICE_ERANGE, err, errlen,
				   "%s: max_keys must be 1 .. %llu", path,
				   (unsigned long long)SHM_MAX_KEYS);
	if ((rc = group_id(path, group, &gid, err, errlen)) != 0)
		return rc;
	layout(max_keys, &want);
	s = calloc(1, sizeof(*s));
	if (!s || !(s->path = strdup(path))) {
		free(s);
		return sluice_fail(SLUICE_ENOMEM, err, errlen, "out of memory");
	}
	if ((rc = open_file(path, gid, &fd, err, errlen)) != 0) {
		free((char *)s->path);
		free(s);
		return rc;
	}
	if (flock(fd, LOCK_EX) != 0)
		rc = sluice_fail(SLUICE_ESTORE, err, errlen, "%s: flock: %s",
				 path, strerror(errno));
	else
		rc = open_locked(s, fd, path, &want, err, errlen);
	/* Unlock explicitly: the mapping keeps the open file (and with it a
	 * flock) alive after close(), in this process and its children. */
	flock(fd, LOCK_UN);
	close(fd);
	if (rc != 0) {
		free((char *)s->path);
		free(s);
		return rc;
	}
	pthread_once(&bus_once, install_sigbus);
	attach(s, &want);
	/* Every shard's entries, under its lock: a shard a dead process
	 * left half updated is repaired as it is locked, so what fails here
	 * was written by no crash: a damaged file, refused. */
	if ((rc = sluice_shmstore_check(s, why, sizeof(why))) != 0) {
		rc = sluice_fail(SLUICE_ESTORE, err, errlen,
				 "%s: damaged: %s; remove the file to start "
				 "afresh",
				 path, why);
		sluice_shmstore_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

int sluice_shmstore_open(sluice_shmstore_t **out, const char *path,
			 size_t max_keys, char *err, size_t errlen)
{
	return sluice_shmstore_open_group(out, path, max_keys, NULL, err,
					  errlen);
}

void sluice_shmstore_close(sluice_shmstore_t *s)
{
	if (!s)
		return;
	/* A failed store's memory stays mapped (see fault()). */
	if (!__atomic_load_n(&s->broken, __ATOMIC_RELAXED))
		munmap(s->map, s->map_bytes);
	free((char *)s->path);
	free(s);
}

void sluice_shmstore__set_lock_wait(sluice_shmstore_t *s, unsigned ms)
{
	size_t i;

	for (i = 0; i < s->b.nshards; i++)
		s->views[i].wait_ms = ms;
}

int sluice_shmstore__failed(const sluice_shmstore_t *s)
{
	return __atomic_load_n(&s->broken, __ATOMIC_RELAXED);
}

int sluice_shmstore_take(sluice_shmstore_t *s, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits,
			 uint64_t cost, int64_t now_us,
			 sluice_decision_t *decisions,
			 sluice_decision_t *summary)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_take(&s->b, key, keylen, limits, nlimits, cost,
				    now_us, decisions, summary));
	return rc;
}

int sluice_shmstore_take_many(sluice_shmstore_t *s, sluice_take_item_t *items,
			      size_t n, int64_t now_us)
{
	int rc;

	GUARDED(s, rc, sluice_buckets_take_many(&s->b, items, n, now_us));
	return rc;
}

int sluice_shmstore_reset(sluice_shmstore_t *s, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_reset(&s->b, key, keylen, limits, nlimits));
	return rc;
}

int sluice_shmstore_refund(sluice_shmstore_t *s, const void *key, size_t keylen,
			   const sluice_limit_t *limits, size_t nlimits,
			   uint64_t cost, int64_t now_us)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_refund(&s->b, key, keylen, limits, nlimits, cost,
				      now_us));
	return rc;
}

static int stats(sluice_shmstore_t *s, sluice_memstore_stats_t *out)
{
	sluice_buckets_stats(&s->b, out);
	return 0;
}

void sluice_shmstore_stats(sluice_shmstore_t *s, sluice_memstore_stats_t *out)
{
	int rc;

	memset(out, 0, sizeof(*out));
	GUARDED(s, rc, stats(s, out));
	(void)rc;
}

static int check_all(sluice_shmstore_t *s, char *err, size_t errlen)
{
	char why[128];
	size_t i;

	for (i = 0; i < s->b.nshards; i++)
		if (sluice_shard_check(&s->views[i], why, sizeof(why)) != 0)
			return sluice_fail(SLUICE_ESTORE, err, errlen,
					   "shard %zu: %s", i, why);
	return 0;
}

int sluice_shmstore_peek(sluice_shmstore_t *s, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits,
			 uint64_t cost, int64_t now_us,
			 sluice_decision_t *decisions,
			 sluice_decision_t *summary)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_peek(&s->b, key, keylen, limits, nlimits, cost,
				    now_us, decisions, summary));
	return rc;
}

int sluice_shmstore_penalize(sluice_shmstore_t *s, const void *key,
			     size_t keylen, const sluice_limit_t *limits,
			     size_t nlimits, uint64_t cost, int64_t now_us)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_adjust(&s->b, key, keylen, limits, nlimits, 0,
				      cost, now_us));
	return rc;
}

int sluice_shmstore_block(sluice_shmstore_t *s, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits,
			  uint64_t ms, int64_t now_us)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_adjust(&s->b, key, keylen, limits, nlimits, 1,
				      ms, now_us));
	return rc;
}

int sluice_shmstore_check(sluice_shmstore_t *s, char *err, size_t errlen)
{
	int rc;

	GUARDED(s, rc, check_all(s, err, errlen));
	if (rc == SLUICE_ESTORE &&
	    __atomic_load_n(&s->broken, __ATOMIC_RELAXED))
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: the file shrank under its mapping "
				   "(truncated?); reopen the store",
				   s->path);
	return rc;
}
