/*
 * registry.c -- per-thread counter blocks and their slot names (see
 * registry.h).
 */
#include "util/registry.h"

#include <stdlib.h>
#include <string.h>

void *sluice_registry_new(sluice_registry_t *r, size_t size)
{
	char *b = calloc(1, size);

	if (!b)
		return NULL;
	pthread_mutex_lock(&r->lock);
	memcpy(b + r->next_at, &r->blocks, sizeof(r->blocks));
	r->blocks = b;
	pthread_mutex_unlock(&r->lock);
	return b;
}

size_t sluice_registry_slot(sluice_registry_t *r, const char *name)
{
	size_t i;

	pthread_mutex_lock(&r->lock);
	for (i = 0; i < r->n; i++)
		if (strcmp(r->names[i], name) == 0)
			break;
	if (i == r->n && r->n < r->cap && (r->names[i] = strdup(name)))
		r->n++;
	if (i >= r->n)
		i = r->cap - 1;
	pthread_mutex_unlock(&r->lock);
	return i;
}
