/*
 * keymap.h -- byte-string keys to dense indexes 0, 1, 2, ...
 *
 * The simulator and the replayer keep per-key state in plain arrays; this
 * table hands out the array index for a key the first time it is seen.
 * Open addressing with linear probing, keys copied into one arena.
 */
#ifndef SLUICE_SIM_KEYMAP_H
#define SLUICE_SIM_KEYMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct sluice_keymap_s sluice_keymap_t;

sluice_keymap_t *sluice_keymap_new(void);
void sluice_keymap_free(sluice_keymap_t *m);

/* The index of key, adding it when absent (*added set to 1 then, may be
 * NULL).  Returns -1 when out of memory. */
int64_t sluice_keymap_get(sluice_keymap_t *m, const void *key, size_t len,
			  int *added);

/* The number of keys so far. */
size_t sluice_keymap_count(const sluice_keymap_t *m);

/* The key with index i (not NUL-terminated; *len set). */
const char *sluice_keymap_key(const sluice_keymap_t *m, size_t i, size_t *len);

#endif /* SLUICE_SIM_KEYMAP_H */
