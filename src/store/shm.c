/*
 * shm.c -- the shared-memory store: the bucket table (buckets_*.c) in a file
 * on a tmpfs (/dev/shm), mapped by every process of a host that opens it,
 * so they all charge the same buckets and a restarted process finds them.
 *
 * Its file (layout, creation, validation, ownership) is shm_file.c's;
 * here are the store's calls, each under a guard against SIGBUS.
 *
 * Each shard's lock is PTHREAD_MUTEX_ROBUST: if a process dies holding it,
 * the next locker is told so (EOWNERDEAD), repairs the shard's table in
 * place (sluice_shard_repair(), itself safe to kill midway) and marks the
 * lock consistent, so nobody is ever left waiting on a dead process.
 *
 * The file's content is never trusted: shm_file.c lays it out from
 * max_keys, never from its header, and checks it at open; every index
 * read from it is masked with the size this process computed, and every
 * probe is bounded.  What the file can still do while mapped --
 * shrink (SIGBUS on the next access) -- is caught: every call runs under
 * a guard that turns a SIGBUS inside this mapping into SLUICE_ESTORE, and
 * the store stays failed (its message says why) until it is opened again.
 * A lock that is not released (a stopped process, a damaged lock word) is
 * waited on for at most SHM_LOCK_WAIT_MS (shm_file.c), then the call fails.
 */
#include "store/shm_int.h"
#include "util/errmsg.h"
#include "util/invariant.h"

#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
	/* Calls on a store never nest on one thread: one guard at a time
	 * (a fault clears it before it jumps). */
	SLUICE_ASSERT(guard_jmp == NULL);
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
		/* Its type back first, as shard_unlock() does. */
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
	char why[256];
	int rc;

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
	s = calloc(1, sizeof(*s));
	if (!s || !(s->path = strdup(path))) {
		free(s);
		return sluice_fail(SLUICE_ENOMEM, err, errlen, "out of memory");
	}
	if ((rc = sluice_shm_file_map(s, path, max_keys, group, err, errlen)) !=
	    0) {
		free((char *)s->path);
		free(s);
		return rc;
	}
	pthread_once(&bus_once, install_sigbus);
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

const char *sluice_shmstore__hash(const sluice_shmstore_t *s)
{
	return s->hash_aes ? "aes" : "siphash";
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

int sluice_shmstore_carry(sluice_shmstore_t *s, const void *key, size_t keylen,
			  const sluice_limit_t *to, const sluice_limit_t *from,
			  size_t nfrom, int64_t now_us)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_carry(&s->b, key, keylen, to, from, nfrom,
				     now_us));
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

int sluice_shmstore_reserve(sluice_shmstore_t *s, const void *key,
			    size_t keylen, const sluice_limit_t *limits,
			    size_t nlimits, uint64_t cost, uint64_t max_wait_us,
			    int64_t now_us, sluice_decision_t *summary,
			    uint64_t *wait_us)
{
	return sluice_shmstore_reserve_left(s, key, keylen, limits, nlimits,
					    cost, max_wait_us, now_us, summary,
					    wait_us, NULL);
}

int sluice_shmstore_reserve_left(sluice_shmstore_t *s, const void *key,
				 size_t keylen, const sluice_limit_t *limits,
				 size_t nlimits, uint64_t cost,
				 uint64_t max_wait_us, int64_t now_us,
				 sluice_decision_t *summary, uint64_t *wait_us,
				 sluice_state_t *left)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_reserve(&s->b, key, keylen, limits, nlimits,
				       cost, max_wait_us, now_us, summary,
				       wait_us, left));
	return rc;
}

int sluice_shmstore_refund_if(sluice_shmstore_t *s, const void *key,
			      size_t keylen, const sluice_limit_t *limits,
			      size_t nlimits, uint64_t cost,
			      const sluice_state_t *expected, int64_t now_us)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_refund_if(&s->b, key, keylen, limits, nlimits,
					 cost, expected, now_us));
	return rc;
}

int sluice_shmstore_set(sluice_shmstore_t *s, const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits,
			uint64_t remaining, int64_t now_us)
{
	int rc;

	GUARDED(s, rc,
		sluice_buckets_set(&s->b, key, keylen, limits, nlimits,
				   remaining, now_us));
	return rc;
}
