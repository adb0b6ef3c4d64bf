/*
 * shm_int.h -- what the shared-memory store's two files share: the store
 * (shm.c: its calls, under the SIGBUS guard) and its file (shm_file.c:
 * opening, creating, validating, ownership checks, mapping).
 */
#ifndef SLUICE_STORE_SHM_INT_H
#define SLUICE_STORE_SHM_INT_H

#include "store/shm.h"
#include "util/aeshash.h"

#define SHM_MAX_KEYS (UINT64_C(1) << 32)

struct sluice_shmstore_s {
	sluice_buckets_t b;
	void *map;
	size_t map_bytes;
	uint8_t seed[16];     /* the file's SipHash key, copied at open */
	int hash_aes;	      /* the file hashes keys <= 16 bytes with AES */
	sluice_aeshash_t aes; /* then its keys, expanded at open */
	const char *path;
	int broken; /* a SIGBUS on the mapping: every call fails */
	sluice_shard_t views[SLUICE_MAX_SHARDS];
};

/*
 * Opens the file at path (created if missing) for a store of max_keys
 * buckets (1 .. SHM_MAX_KEYS) whose file is this user's or, group non-NULL,
 * carries that group: checks its owner, mode and directory, creates or
 * validates its contents under flock(), maps it (s->map, s->map_bytes,
 * s->seed, s->hash_aes, s->aes) and points s's table (s->b, s->views) at the
 * mapping.  0, or an error with a message in err (nothing is then mapped).
 */
int sluice_shm_file_map(sluice_shmstore_t *s, const char *path, size_t max_keys,
			const char *group, char *err, size_t errlen);

#endif /* SLUICE_STORE_SHM_INT_H */
