/*
 * fuzz_shmstore.c -- libFuzzer harness for the shared-memory store's file.
 *
 * The input is the file (the seed corpus holds real ones, laid out for
 * max_keys 64 and 1000 and charged by `sluice serve`).  It is written to
 * a file under /dev/shm and opened with the max_keys its header names
 * when that is 1 to 1000 (else 64: refused unless laid out so); an open
 * either fails with a message or gives a store, on which takes (one key,
 * several limits, several keys), resets, refunds, stats and a check run.
 * When byte 4002 (in the header's unused tail) is not zero, the live file
 * is rewritten with the input rotated by 8 x that byte (another process
 * scribbling over shards and slots) and the calls run again.
 * Then, when the two bytes at 4000 are not
 * zero, the file is shrunk under the live mapping to 64 x their value
 * (a fault, SIGBUS, on the pages past the new end), and the same calls
 * run again.  Nothing may crash, hang (the locks' wait is cut to 5 ms),
 * leak or reach undefined behaviour, whatever the bytes.
 */
#include "sluice.h"
#include "store/shm.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_KEYS      64
#define MAX_KEYS_MOST 1000

static char path[64];

static int write_file(const uint8_t *data, size_t size)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t off = 0;

	if (fd < 0)
		return -1;
	while (off < size) {
		ssize_t n = write(fd, data + off, size - off);

		if (n <= 0)
			break;
		off += (size_t)n;
	}
	close(fd);
	return off == size ? 0 : -1;
}

/* Every verb, over keys that reach every shard. */
static void exercise(sluice_shmstore_t *s, const sluice_limit_t *l, int64_t t)
{
	sluice_take_item_t items[3];
	sluice_memstore_stats_t st;
	sluice_decision_t d[2], sum;
	char key[8], err[256];
	int i, rc;

	for (i = 0; i < 24; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		rc = sluice_shmstore_take(s, key, strlen(key), l, 2, 1,
					  t + i * 1000, d, &sum);
		if (rc != 0 && rc != 1 && rc != SLUICE_ESTORE)
			__builtin_trap();
		if (i % 5 == 0)
			sluice_shmstore_refund(s, key, strlen(key), l, 2, 1,
					       t + i * 1000);
		if (i % 7 == 0)
			sluice_shmstore_reset(s, key, strlen(key), l, 1);
	}
	for (i = 0; i < 3; i++) {
		items[i].key = i == 2 ? "k0" : (i ? "k9" : "k3");
		items[i].keylen = 2;
		items[i].limits = l;
		items[i].nlimits = 2;
		items[i].cost = 1;
	}
	sluice_shmstore_take_many(s, items, 3, t + 50000);
	sluice_shmstore_stats(s, &st);
	sluice_shmstore_check(s, err, sizeof(err));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static sluice_limit_t l[2];
	static int ready;
	sluice_shmstore_t *s = NULL;
	char err[512];
	int64_t t = 1764500000000000LL;
	size_t max_keys = MAX_KEYS;

	if (!ready) {
		snprintf(path, sizeof(path), "/dev/shm/sluice-fuzz-%d",
			 (int)getpid());
		if (sluice_limit_parse(&l[0], "5", "1/s", err, sizeof(err)) ||
		    sluice_limit_parse(&l[1], "20", "10/min", err, sizeof(err)))
			__builtin_trap();
		sluice_shmstore__set_default_lock_wait(5);
		ready = 1;
	}
	if (write_file(data, size) < 0)
		return 0;
	if (size >= 32) {
		uint64_t mk;

		memcpy(&mk, data + 24, sizeof(mk)); /* header_t.max_keys */
		max_keys =
			mk >= 1 && mk <= MAX_KEYS_MOST ? (size_t)mk : MAX_KEYS;
	}
	if (sluice_shmstore_open(&s, path, max_keys, err, sizeof(err)) != 0) {
		if (s || !strstr(err, path))
			__builtin_trap(); /* a refusal names the file */
		unlink(path);
		return 0;
	}
	exercise(s, l, t);
	/* Another process rewrites the live file: the input, rotated by
	 * 8 x byte 4002, so any byte may land on any field. */
	if (size > 4002 && data[4002]) {
		size_t k = (size_t)data[4002] * 8 % size, i;
		int fd = open(path, O_WRONLY | O_CLOEXEC);

		for (i = 0; fd >= 0 && i < size; i += 4096) {
			size_t n = size - i < 4096 ? size - i : 4096, j;
			uint8_t page[4096];

			for (j = 0; j < n; j++)
				page[j] = data[(i + j + k) % size];
			if (pwrite(fd, page, n, (off_t)i) < 0)
				break;
		}
		if (fd >= 0)
			close(fd);
		exercise(s, l, t + 60000);
	}
	if (size > 4001 && (data[4000] || data[4001])) {
		off_t to = 64 * (off_t)(data[4000] | data[4001] << 8);

		if (truncate(path, to) == 0)
			exercise(s, l, t + 100000);
	}
	sluice_shmstore_close(s);
	unlink(path);
	return 0;
}
