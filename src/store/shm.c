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
 */
#include "store/buckets.h"
#include "util/errmsg.h"
#include "util/siphash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_MAGIC    "SLUICESH"
#define SHM_VERSION  1u
#define SHM_HEADER   4096u
#define SHM_MAX_KEYS (UINT64_C(1) << 32)

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
	if (!S_ISREG(st.st_mode))
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: not a regular file", path);
	/* Whoever can write the file can read the hash key and rewrite any
	 * bucket: a file every user may write is no limiter. */
	if (st.st_mode & S_IWOTH)
		return sluice_fail(SLUICE_ESTORE, err, errlen,
				   "%s: writable by every user; refusing it "
				   "(chmod o-w, or remove it)",
				   path);
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
	s->map_bytes = h.file_bytes;
	s->map = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		      fd, 0);
	if (s->map == MAP_FAILED)
		return sluice_fail(SLUICE_ESTORE, err, errlen, "%s: mmap: %s",
				   path, strerror(errno));
	return 0;
}

/* Points this process's views at the mapping. */
static void attach(sluice_shmstore_t *s)
{
	header_t *h = s->map;
	shard_t *shards = (shard_t *)((char *)s->map + SHM_HEADER);
	sluice_slot_t *slots = (sluice_slot_t *)(shards + h->nshards);
	unsigned bits = (unsigned)__builtin_ctzll(h->nshards);
	size_t i;

	s->b.seed = h->seed;
	s->b.nshards = h->nshards;
	s->b.shift = 64 - bits;
	s->b.max_keys = h->max_keys;
	s->b.shards = s->views;
	for (i = 0; i < h->nshards; i++) {
		s->views[i].lock = &shards[i].lock;
		s->views[i].t = &shards[i].t;
		s->views[i].slots = slots + i * h->slots_per_shard;
		s->views[i].can_grow = 0;
	}
}

int sluice_shmstore_open(sluice_shmstore_t **out, const char *path,
			 size_t max_keys, char *err, size_t errlen)
{
	sluice_shmstore_t *s;
	header_t want;
	int fd, rc;

	*out = NULL;
	if (!path || !*path)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "a shared store needs a path");
	if (max_keys == 0 || max_keys > SHM_MAX_KEYS)
		return sluice_fail(SLUICE_ERANGE, err, errlen,
				   "%s: max_keys must be 1 .. %llu", path,
				   (unsigned long long)SHM_MAX_KEYS);
	layout(max_keys, &want);
	s = calloc(1, sizeof(*s));
	if (!s)
		return sluice_fail(SLUICE_ENOMEM, err, errlen, "out of memory");
	/* O_NOFOLLOW: /dev/shm is writable by everyone; never follow a
	 * link planted there into another file. */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		rc = sluice_fail(SLUICE_ESTORE, err, errlen, "%s: %s", path,
				 strerror(errno));
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
		free(s);
		return rc;
	}
	attach(s);
	*out = s;
	return 0;
}

void sluice_shmstore_close(sluice_shmstore_t *s)
{
	if (!s)
		return;
	munmap(s->map, s->map_bytes);
	free(s);
}

int sluice_shmstore_take(sluice_shmstore_t *s, const void *key, size_t keylen,
			 const sluice_limit_t *limits, size_t nlimits,
			 uint64_t cost, int64_t now_us,
			 sluice_decision_t *decisions,
			 sluice_decision_t *summary)
{
	return sluice_buckets_take(&s->b, key, keylen, limits, nlimits, cost,
				   now_us, decisions, summary);
}

int sluice_shmstore_take_many(sluice_shmstore_t *s, sluice_take_item_t *items,
			      size_t n, int64_t now_us)
{
	return sluice_buckets_take_many(&s->b, items, n, now_us);
}

int sluice_shmstore_reset(sluice_shmstore_t *s, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits)
{
	return sluice_buckets_reset(&s->b, key, keylen, limits, nlimits);
}

int sluice_shmstore_refund(sluice_shmstore_t *s, const void *key, size_t keylen,
			   const sluice_limit_t *limits, size_t nlimits,
			   uint64_t cost, int64_t now_us)
{
	return sluice_buckets_refund(&s->b, key, keylen, limits, nlimits, cost,
				     now_us);
}

void sluice_shmstore_stats(sluice_shmstore_t *s, sluice_memstore_stats_t *out)
{
	sluice_buckets_stats(&s->b, out);
}

int sluice_shmstore_check(sluice_shmstore_t *s, char *err, size_t errlen)
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
	return sluice_buckets_peek(&s->b, key, keylen, limits, nlimits, cost,
				   now_us, decisions, summary);
}

int sluice_shmstore_penalize(sluice_shmstore_t *s, const void *key,
			     size_t keylen, const sluice_limit_t *limits,
			     size_t nlimits, uint64_t cost, int64_t now_us)
{
	return sluice_buckets_adjust(&s->b, key, keylen, limits, nlimits, 0,
				     cost, now_us);
}

int sluice_shmstore_block(sluice_shmstore_t *s, const void *key, size_t keylen,
			  const sluice_limit_t *limits, size_t nlimits,
			  uint64_t ms, int64_t now_us)
{
	return sluice_buckets_adjust(&s->b, key, keylen, limits, nlimits, 1, ms,
				     now_us);
}
