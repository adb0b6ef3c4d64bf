/*
 * shm_file.c -- the shared-memory store's file (shm.c is the store): its
 * layout, its creation, its validation at open, and the checks of who
 * owns it and its directory.
 *
 * File layout (little-endian, this machine's ABI):
 *
 *   [0, 4096)       the header: magic, layout version, the parameters the
 *                   layout derives from, the ABI sizes, the SipHash key,
 *                   the key hash (hash kind) and the AES keys it uses
 *   [4096, ...)     one shard_t per shard: a robust process-shared mutex
 *                   and the table counters, each on its own cache lines
 *   then            every shard's slot array, fixed at creation, sized for
 *                   its share of max_keys (never more than 3/4 full)
 *
 * The hash keys are drawn at random when the file is created and live in
 * the file (mode 0600): clients cannot predict which keys collide, and
 * every process that opens the file hashes alike.  Which hash names a key
 * is the file's too (its hash kind), chosen by its creator: AES-128 for
 * keys of up to 16 bytes (util/aeshash.h, as the memory store) when the
 * creating process has AES-NI, SipHash-1-3-128 otherwise, and SipHash for
 * longer keys either way.  Every process sharing a file runs on its host,
 * so they all have what its creator had; one that cannot compute the
 * file's hash (a build without AES, a processor without AES-NI, a kind it
 * does not know) refuses the file.  It never hashes another way: a key
 * would then name other buckets than in the other processes, and get its
 * limit once per hash.
 *
 * Creation and opening happen under flock(LOCK_EX) on the file, which the
 * kernel releases if its holder dies: a creator killed midway leaves a file
 * without its magic, which the next opener initialises again.  The magic
 * is written last.  A file whose header does not match what this build
 * would lay out for max_keys is refused, never reinterpreted.
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
 * refused, with a message).  What the file can still do while mapped is
 * shm.c's (the SIGBUS guard).
 */
#include "store/shm_int.h"
#include "util/aeshash.h"
#include "util/errmsg.h"
#include "util/file.h"
#include "util/invariant.h"
#include "util/platform.h"
#include "util/siphash.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#if SLUICE_LINUX

#define SHM_MAGIC "SLUICESH"
/* 2: the table counters that move on every take (cursor, count) moved
 * into the lock's cache line.  3: the key hash is the file's (hash, aes
 * below); a build of version 2 would read a version 3 file with SipHash.
 * A version 2 file (the same layout, its hash fields zero: every key
 * SipHash) is read as it is, so that processes of both builds share its
 * buckets through an upgrade, and none restarts full; a file of any other
 * version is refused. */
#define SHM_VERSION	    3u
#define SHM_VERSION_SIPHASH 2u
#define SHM_HEADER	    4096u
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
	uint8_t seed[16]; /* the SipHash key */
	uint32_t hash;	  /* SHM_HASH_*: the identity of keys <= 16 bytes */
	uint32_t pad;
	uint8_t aes[32]; /* SHM_HASH_AES: the AES keys A and B (aeshash.h) */
} header_t;

/* The file's key hash (its header's hash field; offset 72). */
#define SHM_HASH_SIPHASH 1u /* SipHash-1-3-128 for every key */
#define SHM_HASH_AES	 2u /* AES-128 for keys <= 16 bytes, else SipHash */

_Static_assert(offsetof(header_t, hash) == 72 && offsetof(header_t, aes) == 80,
	       "the header's hash fields moved (tests patch them)");

typedef struct shard_s {
	pthread_mutex_t lock;
	sluice_table_t t;
} __attribute__((aligned(128))) shard_t;

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
	/* Shards and slots are powers of two (indices are masked), every
	 * shard's share of max_keys fits at most 3/4 full, and the header
	 * fits in its page. */
	SLUICE_ASSERT(n >= 1 && n <= SLUICE_MAX_SHARDS && (n & (n - 1)) == 0 &&
		      n == (size_t)1 << bits && (slots & (slots - 1)) == 0 &&
		      (max_keys / n + 1) * 4 <= slots * 3 &&
		      sizeof(header_t) <= SHM_HEADER);
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

static int no_aes; /* sluice_shmstore__set_no_aes() */

void sluice_shmstore__set_no_aes(int on)
{
	no_aes = on != 0;
}

/* Draws a new file's hash keys and picks its hash: AES when this process
 * can compute it. */
static void draw_keys(header_t *h)
{
	sluice_aeshash_t a;

	sluice_random_bytes(h->seed, sizeof(h->seed));
	h->hash = SHM_HASH_SIPHASH;
	if (!no_aes) {
		sluice_random_bytes(h->aes, sizeof(h->aes));
		if (sluice_aeshash_init(&a, h->aes) == 0)
			h->hash = SHM_HASH_AES;
		memset(&a, 0, sizeof(a));
	}
	if (h->hash != SHM_HASH_AES)
		memset(h->aes, 0, sizeof(h->aes));
}

/* Where a file that does not fit should go (docs/CONFIG.md). */
#define SHM_WHERE                                                              \
	"put the file on a tmpfs with room for it (/dev/shm or /run), or "     \
	"lower max_keys"

/* Refuses a layout the file's filesystem has no room for, before a block
 * is taken: a disk filled by a reservation that then fails stays full
 * (each restart trying again), and other writers there fail meanwhile. */
static int check_room(int fd, const char *path, const header_t *want, char *err,
		      size_t errlen)
{
	struct statvfs v;
	unsigned long long room;

	if (fstatvfs(fd, &v) != 0)
		return 0; /* unknown: the reservation will say */
	room = (unsigned long long)v.f_bavail * v.f_frsize;
	if (room >= want->file_bytes)
		return 0;
	return sluice_fail(SLUICE_ESTORE, err, errlen,
			   "%s: needs %llu bytes for max_keys %llu, its "
			   "filesystem has %llu free; " SHM_WHERE,
			   path, (unsigned long long)want->file_bytes,
			   (unsigned long long)want->max_keys, room);
}

/* Lays out a new (or unfinished) file; the caller holds the flock.  On
 * failure the file is left empty (unfinished: the next opener lays it out
 * again), so that it holds no block. */
static int create(int fd, const char *path, const header_t *want, char *err,
		  size_t errlen)
{
	header_t *h;
	shard_t *shards;
	size_t i;
	int rc;

	if (ftruncate(fd, 0) != 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: cannot size: %s", path,
				   strerror(errno));
	if ((rc = check_room(fd, path, want, err, errlen)) != 0)
		return rc;
	if (ftruncate(fd, (off_t)want->file_bytes) != 0) {
		rc = sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: cannot size it to %llu bytes: %s; " SHM_WHERE,
			path, (unsigned long long)want->file_bytes,
			strerror(errno));
		goto empty;
	}
	/* Reserve every page now: a full tmpfs then fails here, clearly,
	 * rather than as SIGBUS on some later write. */
	if ((rc = posix_fallocate(fd, 0, (off_t)want->file_bytes)) != 0) {
		rc = sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: cannot reserve %llu bytes: %s; " SHM_WHERE, path,
			(unsigned long long)want->file_bytes, strerror(rc));
		goto empty;
	}
	h = mmap(NULL, want->file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		 0);
	if (h == MAP_FAILED) {
		rc = sluice_fail(SLUICE_ESTORE, err, errlen, "%s: mmap: %s",
				 path, strerror(errno));
		goto empty;
	}
	shards = (shard_t *)((char *)h + SHM_HEADER);
	*h = *want;
	memset(h->magic, 0, sizeof(h->magic));
	draw_keys(h);
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
	if (rc != 0) {
		rc = sluice_fail(SLUICE_ESTORE, err, errlen,
				 "%s: cannot make robust shared locks: %s",
				 path, strerror(rc));
		goto empty;
	}
	return 0;
empty:
	/* A failed reservation may keep the blocks it took (a disk
	 * filesystem): give every one back. */
	(void)!ftruncate(fd, 0);
	return rc;
}

/* Refuses a file this build would not have laid out for max_keys. */
static int validate(const char *path, const header_t *h, off_t size,
		    const header_t *want, char *err, size_t errlen)
{
	if (memcmp(h->magic, SHM_MAGIC, sizeof(h->magic)) != 0)
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: not a sluice shared store (no magic)",
				   path);
	if (h->version != SHM_VERSION && h->version != SHM_VERSION_SIPHASH)
		return sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: layout version %u, this build reads versions "
			"%u and %u (remove the file to start afresh)",
			path, h->version, SHM_VERSION_SIPHASH, SHM_VERSION);
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

/* The file's key hash, set up in s; refuses a hash this process cannot
 * compute (never hashes another way: that would split every bucket). */
static int use_hash(sluice_shmstore_t *s, const char *path, const header_t *h,
		    char *err, size_t errlen)
{
	static const uint8_t zero[sizeof(h->aes)];

	memcpy(s->seed, h->seed, sizeof(s->seed));
	s->hash_aes = 0;
	if (h->version == SHM_VERSION_SIPHASH) {
		if (h->hash == 0 && h->pad == 0 &&
		    memcmp(h->aes, zero, sizeof(zero)) == 0)
			return 0;
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: layout version 2 with a key hash set "
				   "(damaged); remove the file to start afresh",
				   path);
	}
	if (h->hash == SHM_HASH_SIPHASH)
		return 0;
	if (h->hash != SHM_HASH_AES)
		return sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: its keys are hashed with hash kind %u, which "
			"this build does not know (made by a newer build, or "
			"damaged); remove the file to start afresh",
			path, h->hash);
	if (no_aes || sluice_aeshash_init(&s->aes, h->aes) != 0)
		return sluice_fail(
			SLUICE_ESTORE, err, errlen,
			"%s: its keys are hashed with AES-128 (AES-NI), which "
			"this %s; refused, not hashed otherwise (that would "
			"split buckets); remove the file to start afresh",
			path,
			SLUICE_HAVE_AESHASH ? "processor does not have"
					    : "build does not compute");
	s->hash_aes = 1;
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
	/* What is mapped below is what this process laid out, and the
	 * header just read (under the flock) says the same. */
	SLUICE_ASSERT(h.file_bytes == want->file_bytes &&
		      (uint64_t)st.st_size == want->file_bytes &&
		      h.nshards == want->nshards &&
		      h.slots_per_shard == want->slots_per_shard);
	/* The size this process computed, checked against the file's. */
	s->map_bytes = want->file_bytes;
	s->map = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		      fd, 0);
	if (s->map == MAP_FAILED)
		return sluice_fail(SLUICE_ESTORE, err, errlen, "%s: mmap: %s",
				   path, strerror(errno));
	if ((rc = use_hash(s, path, &h, err, errlen)) != 0 ||
	    (rc = validate_shards(path, s->map, want, err, errlen)) != 0) {
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
	s->b.aes = s->hash_aes ? &s->aes : NULL;
	s->b.nshards = want->nshards;
	s->b.shift = 64 - bits;
	s->b.max_keys = want->max_keys;
	s->b.shards = s->views;
	/* The last shard's slots end where the mapping does. */
	SLUICE_ASSERT((char *)(slots + want->nshards * want->slots_per_shard) ==
		      (char *)s->map + s->map_bytes);
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
static int open_file(const char *path, gid_t group, int *fdp, int *created,
		     char *err, size_t errlen)
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
	*created = f.created;
	return 0;
}

/*
 * Removes the file this process created and failed to open (emptied, its
 * blocks given back), so that a failed start leaves
 * nothing behind; only while the name still names it (its directory is
 * ours or sticky: check_dir()), and never a file another process made.
 * A process that opened it meanwhile finds it unlinked once it has the
 * flock, and opens the name again (sluice_shm_file_map()).
 */
static void remove_created(int fd, const char *path)
{
	struct stat mine, named;

	if (fstat(fd, &mine) == 0 && lstat(path, &named) == 0 &&
	    mine.st_dev == named.st_dev && mine.st_ino == named.st_ino &&
	    mine.st_size == 0)
		unlink(path);
}

int sluice_shm_file_map(sluice_shmstore_t *s, const char *path, size_t max_keys,
			const char *group, char *err, size_t errlen)
{
	header_t want;
	struct stat st;
	gid_t gid;
	int fd, rc, created, tries = 0;

	SLUICE_ASSERT(max_keys >= 1 && max_keys <= SHM_MAX_KEYS);
	if ((rc = group_id(path, group, &gid, err, errlen)) != 0)
		return rc;
	layout(max_keys, &want);
again:
	if ((rc = open_file(path, gid, &fd, &created, err, errlen)) != 0)
		return rc;
	if (flock(fd, LOCK_EX) != 0) {
		rc = sluice_fail(SLUICE_ESTORE, err, errlen, "%s: flock: %s",
				 path, strerror(errno));
	} else if (fstat(fd, &st) == 0 && st.st_nlink == 0 && tries++ < 8) {
		/* Its creator failed and removed it while we waited for the
		 * lock: the name may name a new file by now. */
		close(fd);
		goto again;
	} else {
		rc = open_locked(s, fd, path, &want, err, errlen);
		/* Nobody has mapped what we made (we hold the flock): a
		 * failed start leaves no file and no block behind. */
		if (rc != 0 && created && ftruncate(fd, 0) == 0)
			remove_created(fd, path);
	}
	/* Unlock explicitly: the mapping keeps the open file (and with it a
	 * flock) alive after close(), in this process and its children. */
	flock(fd, LOCK_UN);
	close(fd);
	if (rc != 0)
		return rc;
	attach(s, &want);
	return 0;
}

#else /* !SLUICE_LINUX */

/* Elsewhere the store is refused at open (util/platform.h says why). */
void sluice_shmstore__set_no_aes(int on)
{
	(void)on;
}

void sluice_shmstore__set_default_lock_wait(unsigned ms)
{
	(void)ms;
}

int sluice_shm_file_map(sluice_shmstore_t *s, const char *path, size_t max_keys,
			const char *group, char *err, size_t errlen)
{
	(void)s;
	(void)max_keys;
	(void)group;
	return sluice_fail(SLUICE_EINVAL, err, errlen,
			   "%s: " SLUICE_SHM_UNSUPPORTED, path);
}

#endif /* SLUICE_LINUX */
