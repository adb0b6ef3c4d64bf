/*
 * bench_core.c -- `sluice_bench`: the in-process numbers of `make bench`.
 *
 *   sluice_bench core   [--seconds S]
 *       pure sluice_eval() decisions per second, one thread
 *   sluice_bench store  --keys N [--threads T] [--seconds S] [--batch B]
 *                       [--rounds R] [--compare-batch B] [--shared PATH]
 *                       [--floor] [--key-bytes L]
 *       memory store decisions per second over N resident keys of L bytes
 *       (16 unless given; 16 .. 64);
 *       --rounds R repeats the timed part R times on the same store and
 *       reports medians with their spread; --compare-batch B (one thread)
 *       times batches of B through take_each in every round as well,
 *       alternating with the single takes; --floor times, in every round
 *       after the takes, what a single take cannot do without: one
 *       dependent random load over a region the size and layout of the
 *       table, the store's hash of a 16-byte key (and SipHash's), and a
 *       lock and unlock of a mutex
 *   sluice_bench latency --mib M [--seconds S]
 *       nanoseconds per dependent random load over M MiB (huge pages
 *       offered): the memory latency one decision on a table that size
 *       waits for at least once
 *   sluice_bench memory --keys N
 *       resident bytes per key of the memory store (RSS growth / N)
 *   sluice_bench redis  --url URL --keys N [--seconds S] [--inflight K]
 *                       [--connections C] [--fill] [--tls-ca FILE]
 *                       [--no-batch]
 *       decisions per second through the Redis store client (script path,
 *       or the module when the server has it), K decisions in flight, and
 *       the client's CPU time per decision; --fill takes once from each of
 *       N keys and stops (for memory); --tls-ca verifies a rediss:// server
 *       against the CA in FILE instead of the system's store; --no-batch
 *       sends every take alone (SLUICE_REDIS_NO_BATCH)
 *
 * Each prints one JSON object on stdout.  Not a test: the figures depend
 * on the machine and go to docs/BENCHMARKS.md through bench/run.
 */
#include "sluice.h"
#include "store/shm.h"
#include "util/aeshash.h"
#include "util/siphash.h"
#ifdef SLUICE_BENCH_REDIS
#include "sluice_redis.h"
#endif

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define SEC INT64_C(1000000)

/* Tokens each key takes when the stores are filled: 90 of 100 at 2/s is
 * 45 s until full, so keys stay resident for a whole run. */
#define FILL_COST 90

typedef struct {
	const char *mode;
	double seconds;
	uint64_t keys;
	unsigned threads;
	const char *url;
	unsigned inflight;
	unsigned connections;
	int fill;
	int no_batch;	    /* redis mode: SLUICE_REDIS_NO_BATCH */
	const char *shared; /* store mode on the shared-memory store here */
	const char *tls_ca; /* redis mode: the CA of a rediss:// server */
	unsigned batch;	    /* store mode: decisions per take_each call */
	unsigned rounds;    /* store mode: timed rounds (medians) */
	unsigned compare;   /* store mode: also batches of this many */
	int floor;	    /* store mode: time the floor too (--floor) */
	unsigned keylen;    /* store mode: bytes per key (--key-bytes) */
	double mib;	    /* latency mode: the region's size */
} opts_t;

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* A random key index below n, by multiplication (no division: the
 * bench's own work per decision stays small next to the store's). */
static uint64_t pick(uint64_t *s, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)splitmix(s) * n) >> 64);
}

/* Key i as 16 bytes: a fixed tag and the index (what a hashed API key or
 * a user id of that length costs). */
static void key16(uint64_t i, unsigned char out[16])
{
	memcpy(out, "sluice-k", 8);
	memcpy(out + 8, &i, 8);
}

/* Key i as len bytes (16 .. 64): key16() for 16, else 'k's and the index
 * in the last 8 bytes (a longer name and identity). */
static void key_n(uint64_t i, unsigned char *out, unsigned len)
{
	if (len == 16) {
		key16(i, out);
		return;
	}
	memset(out, 'k', len - 8);
	memcpy(out + len - 8, &i, 8);
}

static sluice_limit_t classic_limit(void)
{
	sluice_limit_t l;
	char err[128];

	if (sluice_limit_parse(&l, "100", "2/s", err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice_bench: %s\n", err);
		exit(1);
	}
	return l;
}

/* ----------------------------------------------------------------- core */

static int bench_core(const opts_t *o)
{
	sluice_limit_t l = classic_limit();
	sluice_state_t states[1024] = {0};
	sluice_decision_t d;
	uint64_t n = 0, allowed = 0, seed = 1;
	int64_t now = sluice_now_us();
	double t0 = mono_s(), el;

	/* 1024 buckets, each asked about 4 times a second of simulated time
	 * (250 us per decision) while it refills 2/s: about half the decisions
	 * allow, as in a busy service with some abuse. */
	do {
		int i;

		for (i = 0; i < 4096; i++) {
			sluice_state_t *s = &states[splitmix(&seed) & 1023];

			sluice_eval(&l, *s, now, 1, s, &d);
			now += 250;
			allowed += (uint64_t)d.allowed;
		}
		n += 4096;
		el = mono_s() - t0;
	} while (el < o->seconds);
	printf("{\"mode\": \"core\", \"decisions\": %llu, \"seconds\": %.3f, "
	       "\"dps\": %.0f, \"allowed_share\": %.3f}\n",
	       (unsigned long long)n, el, (double)n / el,
	       (double)allowed / (double)n);
	return 0;
}

/* ---------------------------------------------------------------- store */

/* The store mode's store: the memory store, or the shared one (--shared
 * PATH; several sluice_bench processes on one file share it). */
typedef struct {
	sluice_memstore_t *mem;
	sluice_shmstore_t *shm;
} bstore_t;

static int btake(const bstore_t *s, const void *k, size_t klen,
		 const sluice_limit_t *l, uint64_t cost, int64_t now,
		 sluice_decision_t *sum)
{
	return s->shm ? sluice_shmstore_take(s->shm, k, klen, l, 1, cost, now,
					     NULL, sum)
		      : sluice_memstore_take(s->mem, k, klen, l, 1, cost, now,
					     NULL, sum);
}

typedef struct {
	const bstore_t *store;
	const opts_t *o;
	unsigned batch; /* 0: single takes; else take_each batches */
	uint64_t seed;
	uint64_t n;
	double seconds;
	double cpu_seconds; /* the thread's own CPU time */
} worker_t;

/* The calling thread's CPU time: unlike the wall clock, it does not count
 * the time other processes on a busy machine take the core. */
static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *store_worker(void *arg)
{
	worker_t *w = arg;
	sluice_limit_t l = classic_limit();
	sluice_decision_t sum;
	unsigned char k[64], bk[256][64];
	unsigned kl = w->o->keylen;
	sluice_take_item_t items[256];
	unsigned batch = w->batch, j;
	double t0 = mono_s(), c0 = thread_cpu_s(), el;
	int64_t now = sluice_now_us();

	for (j = 0; j < batch; j++) {
		memset(&items[j], 0, sizeof(items[j]));
		items[j].key = bk[j];
		items[j].keylen = kl;
		items[j].limits = &l;
		items[j].nlimits = 1;
		items[j].cost = 1;
	}
	do {
		int i;

		if (batch > 0) {
			/* Batches of independent decisions (the memory store;
			 * bench_store() refuses --batch with --shared). */
			for (i = 0; i < 1024; i += (int)batch) {
				for (j = 0; j < batch; j++)
					key_n(pick(&w->seed, w->o->keys), bk[j],
					      kl);
				sluice_memstore_take_each(w->store->mem, items,
							  batch, now);
			}
			w->n += (uint64_t)i;
		} else {
			for (i = 0; i < 1024; i++) {
				key_n(pick(&w->seed, w->o->keys), k, kl);
				btake(w->store, k, kl, &l, 1, now, &sum);
			}
			w->n += 1024;
		}
		now = sluice_now_us();
		el = mono_s() - t0;
	} while (el < w->o->seconds);
	w->seconds = el;
	w->cpu_seconds = thread_cpu_s() - c0;
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* "name": the median of v[0..n), "name_min" and "name_max" (v is
 * sorted). */
static void print_spread(const char *name, double *v, unsigned n)
{
	double med;

	qsort(v, n, sizeof(*v), cmp_double);
	med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	printf("\"%s\": %.0f, \"%s_min\": %.0f, \"%s_max\": %.0f, ", name, med,
	       name, v[0], name, v[n - 1]);
}

/* print_spread() with one decimal (nanoseconds). */
static void print_spread1(const char *name, double *v, unsigned n)
{
	double med;

	qsort(v, n, sizeof(*v), cmp_double);
	med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	printf("\"%s\": %.1f, \"%s_min\": %.1f, \"%s_max\": %.1f, ", name, med,
	       name, v[0], name, v[n - 1]);
}

/* The machine's 1-minute load average (the bench shares it), or -1. */
static double loadavg(void)
{
	double l[1];

	return getloadavg(l, 1) == 1 ? l[0] : -1;
}

/*
 * The floor of a single take (--floor): what each one waits for or runs
 * whatever the store does around it, timed in the same process between the
 * rounds of takes, so on the same machine under the same load.
 */
typedef struct {
	unsigned char *region; /* slots the size and layout of the table */
	size_t slots;
	uint64_t at; /* where the chase stands */
	sluice_aeshash_t aes;
	int have_aes;
	uint8_t seed[16];
} floor_t;

/* The table's slots for n keys: each shard's array doubles until it is at
 * most 3/4 full, and the shards grow together, so all of them hold the
 * smallest power of two of 24-byte slots with n at most 3/4 of it. */
static size_t table_slots(uint64_t n)
{
	size_t slots = 16;

	while ((uint64_t)slots * 3 / 4 < n)
		slots *= 2;
	return slots;
}

#define SLOT_BYTES 24

/* A region of 24-byte slots as the table's arena holds them (one mapping,
 * huge pages offered), each slot's first word the index of the next slot
 * of a random cycle through all of them (Sattolo), so that no load can
 * start before the previous one ends and no prefetcher can guess; a slot
 * may straddle two lines, as a table's may. */
static int floor_init(floor_t *f, uint64_t keys)
{
	uint64_t seed = 777;
	size_t i;

	memset(f, 0, sizeof(*f));
	f->slots = table_slots(keys);
	f->region = mmap(NULL, f->slots * SLOT_BYTES, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (f->region == MAP_FAILED)
		return -1;
	madvise(f->region, f->slots * SLOT_BYTES, MADV_HUGEPAGE);
	for (i = 0; i < f->slots; i++) {
		uint64_t v = i;

		memcpy(f->region + i * SLOT_BYTES, &v, 8);
	}
	for (i = f->slots - 1; i > 0; i--) {
		size_t j = (size_t)pick(&seed, i);
		uint64_t a, b;

		memcpy(&a, f->region + i * SLOT_BYTES, 8);
		memcpy(&b, f->region + j * SLOT_BYTES, 8);
		memcpy(f->region + i * SLOT_BYTES, &b, 8);
		memcpy(f->region + j * SLOT_BYTES, &a, 8);
	}
	sluice_random_bytes(f->seed, sizeof(f->seed));
	{
		uint8_t k[32];

		sluice_random_bytes(k, sizeof(k));
		f->have_aes = sluice_aeshash_init(&f->aes, k) == 0;
	}
	return 0;
}

/* Nanoseconds per dependent load, over at least `seconds` of CPU time. */
static double floor_load_ns(floor_t *f, double seconds)
{
	const unsigned char *r = f->region;
	uint64_t at = f->at, n = 0;
	double c0 = thread_cpu_s(), el;

	do {
		int k;

		for (k = 0; k < 100000; k++)
			memcpy(&at, r + at * SLOT_BYTES, 8);
		n += 100000;
		el = thread_cpu_s() - c0;
	} while (el < seconds);
	f->at = at;
	return el * 1e9 / (double)n;
}

/* Nanoseconds per hash of a 16-byte key, each key made from the hash
 * before (latency: a take's miss cannot start before its hash ends);
 * aes 1: the memory store's hash of such keys, 0: SipHash-1-3-128. */
static double floor_hash_ns(floor_t *f, int aes, double seconds)
{
	uint64_t h[2] = {1, 2}, n = 0;
	unsigned char k[16];
	double c0 = thread_cpu_s(), el;

	do {
		int i;

		for (i = 0; i < 100000; i++) {
			key16(h[0] ^ h[1], k);
			if (aes)
				sluice_aeshash(&f->aes, k, sizeof(k), h);
			else
				sluice_siphash13_128(f->seed, k, sizeof(k), h);
		}
		n += 100000;
		el = thread_cpu_s() - c0;
	} while (el < seconds);
	f->at ^= h[0] & 1; /* keep the result */
	return el * 1e9 / (double)n;
}

/* Nanoseconds per lock and unlock of an uncontended pthread mutex, as a
 * shard's lock is taken (a trylock) and released. */
static double floor_lock_ns(double seconds)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	uint64_t n = 0;
	double c0 = thread_cpu_s(), el;

	do {
		int i;

		for (i = 0; i < 100000; i++)
			if (pthread_mutex_trylock(&mu) == 0)
				pthread_mutex_unlock(&mu);
		n += 100000;
		el = thread_cpu_s() - c0;
	} while (el < seconds);
	return el * 1e9 / (double)n;
}

static int bench_store(const opts_t *o)
{
	size_t max_keys = (size_t)(o->keys + o->keys / 4 + 16);
	bstore_t bs = {NULL, NULL}, *st = &bs;
	char err[512] = "out of memory";
	sluice_limit_t l = classic_limit();
	sluice_decision_t sum;
	sluice_memstore_stats_t stats;
	worker_t w[64];
	pthread_t th[64];
	unsigned char k[64];
	uint64_t i, total = 0;
	double secs = 0, cpu = 0;
	double dps[2][64], per_cpu[2][64];
	double fl_load[64], fl_hash[64], fl_sip[64], fl_lock[64];
	unsigned t, r, rounds = o->rounds ? o->rounds : 1, kind;
	floor_t fl;

	if (o->shared)
		sluice_shmstore_open(&bs.shm, o->shared, max_keys, err,
				     sizeof(err));
	else
		sluice_memstore_open(&bs.mem, max_keys, NULL, 0);
	if ((!bs.mem && !bs.shm) || o->threads < 1 || o->threads > 64 ||
	    o->batch > 256 || o->compare > 256 || rounds > 64 ||
	    ((o->batch || o->compare) && o->shared) ||
	    (o->compare && (o->threads > 1 || o->batch)) || o->keylen < 16 ||
	    o->keylen > 64 || (o->floor && floor_init(&fl, o->keys) != 0)) {
		fprintf(stderr,
			"sluice_bench: store: %s, or bad --threads, --batch, "
			"--compare-batch (1 .. 256, memory store only, one "
			"thread), --rounds (1 .. 64) or --key-bytes (16 .. "
			"64)\n",
			err);
		return 1;
	}
	/* Every key resident before timing starts.  Taking FILL_COST tokens
	 * keeps a key's state (not full) for 45 s, longer than the fill and
	 * the run: a full bucket would be forgotten. */
	for (i = 0; i < o->keys; i++) {
		key_n(i, k, o->keylen);
		btake(st, k, o->keylen, &l, FILL_COST, sluice_now_us(), &sum);
	}
	/* Each round times the single takes (or --batch), then, with
	 * --compare-batch, the batches; the order alternates from round to
	 * round so that neither side always runs first on a busy machine. */
	for (r = 0; r < rounds * (o->compare ? 2 : 1); r++) {
		unsigned batch = o->batch;
		uint64_t n = 0;
		double rs = 0, rc = 0;

		kind = o->compare ? (r / 2 + r) % 2 : 0;
		if (kind)
			batch = o->compare;
		for (t = 0; t < o->threads; t++) {
			memset(&w[t], 0, sizeof(w[t]));
			w[t].store = st;
			w[t].o = o;
			w[t].batch = batch;
			w[t].seed = 1000 + t + 64 * r;
			if (pthread_create(&th[t], NULL, store_worker, &w[t]) !=
			    0) {
				fprintf(stderr, "sluice_bench: pthread_create "
						"failed\n");
				return 1;
			}
		}
		for (t = 0; t < o->threads; t++) {
			pthread_join(th[t], NULL);
			n += w[t].n;
			if (w[t].seconds > rs)
				rs = w[t].seconds;
			rc += w[t].cpu_seconds;
		}
		dps[kind][r / (o->compare ? 2 : 1)] = (double)n / rs;
		per_cpu[kind][r / (o->compare ? 2 : 1)] =
			rc > 0 ? (double)n / rc : 0;
		if (!kind) {
			total += n;
			secs += rs;
			cpu += rc;
		}
		/* After the round's takes (both kinds): the floor. */
		if (o->floor && (!o->compare || r % 2 == 1)) {
			unsigned fr = r / (o->compare ? 2 : 1);

			fl_load[fr] = floor_load_ns(&fl, 0.5);
			fl_hash[fr] =
				fl.have_aes ? floor_hash_ns(&fl, 1, 0.1) : 0;
			fl_sip[fr] = floor_hash_ns(&fl, 0, 0.1);
			fl_lock[fr] = floor_lock_ns(0.1);
		}
	}
	if (bs.shm)
		sluice_shmstore_stats(bs.shm, &stats);
	else
		sluice_memstore_stats(bs.mem, &stats);
	/* dps_per_cpu_s: decisions per second of a thread's own CPU time,
	 * what one core would do if nothing else ran on it. */
	printf("{\"mode\": \"store\", \"key_bytes\": %u, \"keys\": %llu, "
	       "\"threads\": %u, "
	       "\"batch\": %u, \"rounds\": %u, \"resident_keys\": %llu, "
	       "\"decisions\": %llu, \"seconds\": %.3f, \"cpu_seconds\": "
	       "%.3f, ",
	       o->keylen, (unsigned long long)o->keys, o->threads, o->batch,
	       rounds, (unsigned long long)stats.keys,
	       (unsigned long long)total, secs, cpu);
	print_spread("dps", dps[0], rounds);
	print_spread("dps_per_cpu_s", per_cpu[0], rounds);
	if (bs.shm) /* the file's key hash: "aes" or "siphash" */
		printf("\"shared_hash\": \"%s\", ",
		       sluice_shmstore__hash(bs.shm));
	if (o->compare) {
		printf("\"compare_batch\": %u, ", o->compare);
		print_spread("batch_dps", dps[1], rounds);
		print_spread("batch_dps_per_cpu_s", per_cpu[1], rounds);
	}
	if (o->floor) {
		/* The store's hash of a 16-byte key: AES where it has it. */
		printf("\"table_mib\": %.1f, \"store_hash\": \"%s\", ",
		       (double)fl.slots * SLOT_BYTES / 1048576.0,
		       fl.have_aes && bs.mem ? "aes" : "siphash");
		print_spread1("floor_load_ns", fl_load, rounds);
		print_spread1("floor_hash_ns",
			      fl.have_aes && bs.mem ? fl_hash : fl_sip, rounds);
		print_spread1("floor_siphash_ns", fl_sip, rounds);
		print_spread1("floor_lock_ns", fl_lock, rounds);
		munmap(fl.region, fl.slots * SLOT_BYTES);
	}
	printf("\"loadavg_1m\": %.2f}\n", loadavg());
	sluice_memstore_free(bs.mem);
	sluice_shmstore_close(bs.shm);
	return 0;
}

/* --------------------------------------------------------------- memory */

static long rss_bytes(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
		resident = -1;
	fclose(f);
	return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

static int bench_memory(const opts_t *o)
{
	sluice_limit_t l = classic_limit();
	sluice_decision_t sum;
	sluice_memstore_stats_t stats;
	sluice_memstore_t *st;
	unsigned char k[16];
	long before, after;
	uint64_t i;
	int64_t now = sluice_now_us();

	/* Room for a quarter more than N, so that no shard evicts. */
	before = rss_bytes();
	sluice_memstore_open(&st, (size_t)(o->keys + o->keys / 4 + 16), NULL,
			     0);
	if (!st) {
		fprintf(stderr, "sluice_bench: memory: out of memory\n");
		return 1;
	}
	/* Each key takes FILL_COST tokens, so every state is "not full" and
	 * stays resident (a full bucket would be forgotten). */
	for (i = 0; i < o->keys; i++) {
		key16(i, k);
		sluice_memstore_take(st, k, sizeof(k), &l, 1, FILL_COST, now,
				     NULL, &sum);
	}
	after = rss_bytes();
	sluice_memstore_stats(st, &stats);
	printf("{\"mode\": \"memory\", \"keys\": %llu, \"resident_keys\": "
	       "%llu, \"rss_before\": %ld, \"rss_after\": %ld, "
	       "\"bytes_per_key\": %.1f}\n",
	       (unsigned long long)o->keys, (unsigned long long)stats.keys,
	       before, after,
	       (double)(after - before) /
		       (double)(stats.keys ? stats.keys : 1));
	sluice_memstore_free(st);
	return 0;
}

/* -------------------------------------------------------------- latency */

/*
 * One dependent random load after another over M MiB: a cyclic random
 * permutation of its 64-byte lines (Sattolo), each line holding the index
 * of the next, so that no load can start before the previous one ends and
 * no prefetcher can guess.  The region is offered huge pages, as the memory
 * store's larger tables are.  A single take on a table of that size reads
 * at least one such line it has not touched recently: 1e9 / ns is the
 * most single takes per second a thread can make on it, whatever else
 * they do.
 */
static int bench_latency(const opts_t *o)
{
	size_t bytes = (size_t)(o->mib * 1048576.0), lines = bytes / 64, i;
	uint64_t *p, seed = 12345, at = 0, n = 0;
	double c0, el;

	if (lines < 2) {
		fprintf(stderr, "sluice_bench: latency: --mib too small\n");
		return 1;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "sluice_bench: latency: out of memory\n");
		return 1;
	}
	madvise(p, bytes, MADV_HUGEPAGE);
	for (i = 0; i < lines; i++)
		p[i * 8] = i;
	for (i = lines - 1; i > 0; i--) {
		size_t j = (size_t)pick(&seed, i), t = p[i * 8];

		p[i * 8] = p[j * 8];
		p[j * 8] = t;
	}
	c0 = thread_cpu_s();
	do {
		int k;

		for (k = 0; k < 100000; k++)
			at = p[at * 8];
		n += 100000;
		el = thread_cpu_s() - c0;
	} while (el < o->seconds);
	printf("{\"mode\": \"latency\", \"mib\": %.0f, \"loads\": %llu, "
	       "\"ns_per_load\": %.1f, \"ceiling_dps\": %.0f, \"end\": "
	       "%llu, \"loadavg_1m\": %.2f}\n",
	       o->mib, (unsigned long long)n, el * 1e9 / (double)n,
	       (double)n / el, (unsigned long long)at, loadavg());
	munmap(p, bytes);
	return 0;
}

/* ---------------------------------------------------------------- redis */

#ifdef SLUICE_BENCH_REDIS
/* This process's CPU time (user + system), in seconds: with TLS, the
 * client's share of the cost is its encryption. */
static double cpu_s(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

typedef struct {
	uv_loop_t *loop;
	sluice_redis_t *r;
	const opts_t *o;
	sluice_limit_t limit;
	uint64_t seed, issued, done, failed, allowed;
	uint64_t next_key; /* --fill: keys 0..N-1 in order */
	double t0, t_end;
	int stopping;
	/* Calls to start: a call that fails fast (breaker open, no usable
	 * connection) answers inside sluice_redis_take(), and starting its
	 * successor from there would recurse once per call until the stack
	 * runs out.  issue() starts them in a loop instead. */
	unsigned owed;
	int issuing;
	uint32_t *lat_us; /* latency samples */
	size_t nlat, caplat;
} rb_t;

typedef struct {
	rb_t *b;
	double start;
} rcall_t;

static void issue(rb_t *b);
static void issue_one(rb_t *b);

static void on_take(void *arg, int status, int allowed,
		    const sluice_decision_t *summary, size_t which)
{
	rcall_t *c = arg;
	rb_t *b = c->b;
	double now = mono_s();

	(void)summary;
	(void)which;
	b->done++;
	if (status < 0)
		b->failed++;
	else
		b->allowed += (uint64_t)allowed;
	if (b->nlat < b->caplat)
		b->lat_us[b->nlat++] = (uint32_t)((now - c->start) * 1e6);
	free(c);
	if (!b->stopping)
		issue(b);
}

static void issue(rb_t *b)
{
	b->owed++;
	if (b->issuing)
		return;
	b->issuing = 1;
	while (b->owed && !b->stopping) {
		b->owed--;
		issue_one(b);
	}
	b->owed = 0;
	b->issuing = 0;
}

static void issue_one(rb_t *b)
{
	char key[32];
	int len;
	rcall_t *c;

	if (b->o->fill ? b->next_key >= b->o->keys : mono_s() >= b->t_end) {
		b->stopping = 1;
		return;
	}
	c = malloc(sizeof(*c));
	if (!c) {
		b->stopping = 1;
		return;
	}
	c->b = b;
	c->start = mono_s();
	len = snprintf(key, sizeof(key), "k%llu",
		       (unsigned long long)(b->o->fill ? b->next_key++
						       : splitmix(&b->seed) %
								 b->o->keys));
	b->issued++;
	/* --fill keeps every key for 45 s (see FILL_COST), past the
	 * measurement of Redis's memory. */
	if (sluice_redis_take(b->r, key, (size_t)len, &b->limit, 1,
			      b->o->fill ? FILL_COST : 1, on_take, c) != 0) {
		b->failed++;
		b->done++;
		free(c);
		b->stopping = 1;
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static void on_tick(uv_timer_t *t)
{
	rb_t *b = t->data;

	if (b->stopping && b->done == b->issued) {
		uv_timer_stop(t);
		uv_stop(b->loop);
	}
}

static int bench_redis(const opts_t *o)
{
	uv_loop_t loop;
	uv_timer_t tick;
	sluice_redis_opts_t ro;
	sluice_redis_tls_t tls;
	rb_t b;
	char err[256];
	double t_ready, el, cpu;
	unsigned i;

	memset(&b, 0, sizeof(b));
	memset(&ro, 0, sizeof(ro));
	memset(&tls, 0, sizeof(tls));
	ro.url = o->url;
	ro.timeout_ms = 1000;
	ro.connections = o->connections;
	if (o->no_batch)
		ro.flags |= SLUICE_REDIS_NO_BATCH;
	if (o->tls_ca) {
		tls.enabled = 1;
		tls.ca_file = o->tls_ca;
		ro.tls = &tls;
	}
	uv_loop_init(&loop);
	b.loop = &loop;
	b.o = o;
	b.seed = 7;
	b.limit = classic_limit();
	b.caplat = 4000000;
	b.lat_us = malloc(b.caplat * sizeof(*b.lat_us));
	if (!b.lat_us ||
	    sluice_redis_open(&b.r, &loop, &ro, err, sizeof(err)) != 0) {
		fprintf(stderr, "sluice_bench: redis: %s\n", err);
		return 1;
	}
	/* Wait (up to 5 s) for the connections. */
	t_ready = mono_s() + 5;
	while (!sluice_redis_healthy(b.r) && mono_s() < t_ready)
		uv_run(&loop, UV_RUN_NOWAIT);
	if (!sluice_redis_healthy(b.r)) {
		fprintf(stderr, "sluice_bench: redis: %s: not reachable\n",
			o->url);
		return 1;
	}
	uv_timer_init(&loop, &tick);
	tick.data = &b;
	uv_timer_start(&tick, on_tick, 10, 10);
	b.t0 = mono_s();
	b.t_end = b.t0 + o->seconds;
	cpu = cpu_s();
	for (i = 0; i < o->inflight && !b.stopping; i++)
		issue(&b);
	uv_run(&loop, UV_RUN_DEFAULT);
	el = mono_s() - b.t0;
	cpu = cpu_s() - cpu;
	qsort(b.lat_us, b.nlat, sizeof(*b.lat_us), cmp_u32);
	printf("{\"mode\": \"redis\", \"keys\": %llu, \"decisions\": %llu, "
	       "\"failed\": %llu, \"allowed\": %llu, \"seconds\": %.3f, "
	       "\"dps\": %.0f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, "
	       "\"cpu_us_per_decision\": %.3f}\n",
	       (unsigned long long)o->keys, (unsigned long long)b.done,
	       (unsigned long long)b.failed, (unsigned long long)b.allowed, el,
	       (double)(b.done - b.failed) / el,
	       b.nlat ? b.lat_us[b.nlat / 2] / 1000.0 : 0.0,
	       b.nlat ? b.lat_us[b.nlat * 99 / 100] / 1000.0 : 0.0,
	       cpu * 1e6 / (double)(b.done ? b.done : 1));
	sluice_redis_free(b.r);
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	free(b.lat_us);
	return b.failed == b.done ? 1 : 0;
}
#else
static int bench_redis(const opts_t *o)
{
	(void)o;
	printf("{\"mode\": \"redis\", \"error\": \"this build has no Redis "
	       "store (src/store/redis)\"}\n");
	return 3;
}
#endif

/* ----------------------------------------------------------------- main */

static int usage(void)
{
	fprintf(stderr,
		"usage: sluice_bench core [--seconds S]\n"
		"       sluice_bench store --keys N [--threads T] [--seconds "
		"S] [--shared PATH] [--batch B] [--rounds R] "
		"[--compare-batch B] [--floor] [--key-bytes L]\n"
		"       sluice_bench memory --keys N\n"
		"       sluice_bench latency --mib M [--seconds S]\n"
		"       sluice_bench redis --url URL --keys N [--seconds S] "
		"[--inflight K] [--connections C] [--fill] [--tls-ca FILE] "
		"[--no-batch]\n");
	return 2;
}

static int number(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = s ? strtod(s, &end) : 0;
	return s && !errno && *end == '\0' && *out > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	opts_t o = {0};
	double v;
	int i;

	if (argc < 2)
		return usage();
	o.mode = argv[1];
	o.seconds = 3;
	o.keys = 1000;
	o.keylen = 16;
	o.threads = 1;
	o.inflight = 256;
	o.connections = 1;
	for (i = 2; i < argc; i++) {
		const char *a = argv[i],
			   *val = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--fill") == 0) {
			o.fill = 1;
			continue;
		}
		if (strcmp(a, "--floor") == 0) {
			o.floor = 1;
			continue;
		}
		if (strcmp(a, "--no-batch") == 0) {
			o.no_batch = 1;
			continue;
		}
		if (strcmp(a, "--url") == 0 && val) {
			o.url = val;
			i++;
			continue;
		}
		if (strcmp(a, "--shared") == 0 && val) {
			o.shared = val;
			i++;
			continue;
		}
		if (strcmp(a, "--tls-ca") == 0 && val) {
			o.tls_ca = val;
			i++;
			continue;
		}
		if (number(val, &v) < 0)
			return usage();
		i++;
		if (strcmp(a, "--seconds") == 0)
			o.seconds = v;
		else if (strcmp(a, "--keys") == 0)
			o.keys = (uint64_t)v;
		else if (strcmp(a, "--threads") == 0)
			o.threads = (unsigned)v;
		else if (strcmp(a, "--inflight") == 0)
			o.inflight = (unsigned)v;
		else if (strcmp(a, "--connections") == 0)
			o.connections = (unsigned)v;
		else if (strcmp(a, "--batch") == 0)
			o.batch = (unsigned)v;
		else if (strcmp(a, "--rounds") == 0)
			o.rounds = (unsigned)v;
		else if (strcmp(a, "--compare-batch") == 0)
			o.compare = (unsigned)v;
		else if (strcmp(a, "--key-bytes") == 0)
			o.keylen = (unsigned)v;
		else if (strcmp(a, "--mib") == 0)
			o.mib = v;
		else
			return usage();
	}
	if (strcmp(o.mode, "core") == 0)
		return bench_core(&o);
	if (strcmp(o.mode, "store") == 0)
		return bench_store(&o);
	if (strcmp(o.mode, "memory") == 0)
		return bench_memory(&o);
	if (strcmp(o.mode, "latency") == 0)
		return bench_latency(&o);
	if (strcmp(o.mode, "redis") == 0)
		return o.url ? bench_redis(&o) : usage();
	return usage();
}
