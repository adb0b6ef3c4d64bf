/*
 * shm.h -- the shared-memory store's internals that its tests and fuzz
 * harness reach (the API is in sluice.h).
 */
#ifndef SLUICE_STORE_SHM_H
#define SLUICE_STORE_SHM_H

#include "store/buckets.h"

/* How long a call waits for a shard's lock before it fails with
 * SLUICE_ESTORE (default 10,000 ms); tests shorten it. */
void sluice_shmstore__set_lock_wait(sluice_shmstore_t *s, unsigned ms);

/* The wait of stores opened from now on (their open's check included);
 * for the fuzz harness, which must not wait 10 s on a damaged lock. */
void sluice_shmstore__set_default_lock_wait(unsigned ms);

/* 1 once a call met the file shrunk under the mapping (every call then
 * fails with SLUICE_ESTORE). */
int sluice_shmstore__failed(const sluice_shmstore_t *s);

/* The key hash of an open store's file: "aes" (AES-128 for keys of up to
 * 16 bytes, SipHash for longer ones) or "siphash" (every key). */
const char *sluice_shmstore__hash(const sluice_shmstore_t *s);

/* Non-zero: this process acts as one without AES-NI from now on (files it
 * creates hash with SipHash; files that hash with AES are refused); for
 * tests. */
void sluice_shmstore__set_no_aes(int on);

#endif /* SLUICE_STORE_SHM_H */
