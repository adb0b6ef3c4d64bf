/*
 * keymap.c -- see keymap.h.
 */
#include "sim/keymap.h"

#include <stdlib.h>
#include <string.h>

struct sluice_keymap_s {
	uint32_t *slots; /* index + 1, 0 = empty */
	size_t nslots;	 /* power of two */
	size_t *offs;	 /* key i starts at arena + offs[i] */
	uint32_t *lens;
	size_t *hashes;
	size_t count, cap;
	char *arena;
	size_t used, arena_cap;
};

/* FNV-1a: keys are short and not chosen by an attacker here. */
static size_t hash_bytes(const void *key, size_t len)
{
	const unsigned char *p = key;
	uint64_t h = UINT64_C(14695981039346656037);

	while (len--) {
		h ^= *p++;
		h *= UINT64_C(1099511628211);
	}
	return (size_t)(h ^ (h >> 32));
}

sluice_keymap_t *sluice_keymap_new(void)
{
	sluice_keymap_t *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->nslots = 1024;
	m->slots = calloc(m->nslots, sizeof(*m->slots));
	if (!m->slots) {
		free(m);
		return NULL;
	}
	return m;
}

void sluice_keymap_free(sluice_keymap_t *m)
{
	if (!m)
		return;
	free(m->slots);
	free(m->offs);
	free(m->lens);
	free(m->hashes);
	free(m->arena);
	free(m);
}

static int grow_slots(sluice_keymap_t *m)
{
	size_t n = m->nslots * 2, i;
	uint32_t *s = calloc(n, sizeof(*s));

	if (!s)
		return -1;
	for (i = 0; i < m->count; i++) {
		size_t j = m->hashes[i] & (n - 1);

		while (s[j])
			j = (j + 1) & (n - 1);
		s[j] = (uint32_t)i + 1;
	}
	free(m->slots);
	m->slots = s;
	m->nslots = n;
	return 0;
}

static int append(sluice_keymap_t *m, const void *key, size_t len, size_t h)
{
	if (m->count == m->cap) {
		size_t c = m->cap ? m->cap * 2 : 256;
		size_t *o = realloc(m->offs, c * sizeof(*o));
		uint32_t *l;
		size_t *hs;

		if (!o)
			return -1;
		m->offs = o;
		l = realloc(m->lens, c * sizeof(*l));
		if (!l)
			return -1;
		m->lens = l;
		hs = realloc(m->hashes, c * sizeof(*hs));
		if (!hs)
			return -1;
		m->hashes = hs;
		m->cap = c;
	}
	if (m->used + len > m->arena_cap) {
		size_t c = m->arena_cap ? m->arena_cap * 2 : 4096;
		char *a;

		while (c < m->used + len)
			c *= 2;
		a = realloc(m->arena, c);
		if (!a)
			return -1;
		m->arena = a;
		m->arena_cap = c;
	}
	memcpy(m->arena + m->used, key, len);
	m->offs[m->count] = m->used;
	m->lens[m->count] = (uint32_t)len;
	m->hashes[m->count] = h;
	m->used += len;
	m->count++;
	return 0;
}

int64_t sluice_keymap_get(sluice_keymap_t *m, const void *key, size_t len,
			  int *added)
{
	size_t h = hash_bytes(key, len), j;

	if (added)
		*added = 0;
	for (j = h & (m->nslots - 1); m->slots[j];
	     j = (j + 1) & (m->nslots - 1)) {
		size_t i = m->slots[j] - 1;

		if (m->hashes[i] == h && m->lens[i] == len &&
		    memcmp(m->arena + m->offs[i], key, len) == 0)
			return (int64_t)i;
	}
	if (len > UINT32_MAX || m->count >= UINT32_MAX - 1 ||
	    append(m, key, len, h) < 0)
		return -1;
	m->slots[j] = (uint32_t)m->count;
	if (added)
		*added = 1;
	/* Keep the load under one half so probes stay short. */
	if (m->count * 2 > m->nslots && grow_slots(m) < 0)
		return -1;
	return (int64_t)m->count - 1;
}

size_t sluice_keymap_count(const sluice_keymap_t *m)
{
	return m->count;
}

const char *sluice_keymap_key(const sluice_keymap_t *m, size_t i, size_t *len)
{
	*len = m->lens[i];
	return m->arena + m->offs[i];
}
