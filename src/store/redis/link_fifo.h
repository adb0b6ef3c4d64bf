/*
 * link_fifo.h -- link.c's ring of reply callbacks: Redis answers in the
 * order commands were sent, so the oldest callback waiting is the one a
 * reply belongs to.
 */
#ifndef SLUICE_REDIS_LINK_FIFO_H
#define SLUICE_REDIS_LINK_FIFO_H

#include "store/redis/redis_int.h"
#include "util/invariant.h"

#include <stdlib.h>

typedef struct pending_s {
	sluice_redis_reply_fn *fn;
	void *priv;
} pending_t;

typedef struct link_fifo_s {
	pending_t *v; /* ring of cap, count of them from head */
	size_t head, count, cap;
} link_fifo_t;

/* Appends a callback; 0, or -1 when out of memory. */
static inline int fifo_push(link_fifo_t *l, sluice_redis_reply_fn *fn,
			    void *priv)
{
	if (l->count == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16, i;
		pending_t *grown = malloc(cap * sizeof(*grown));

		if (!grown)
			return -1;
		for (i = 0; i < l->count; i++)
			grown[i] = l->v[(l->head + i) % l->cap];
		free(l->v);
		l->v = grown;
		l->head = 0;
		l->cap = cap;
	}
	SLUICE_ASSERT(l->count < l->cap && l->head < l->cap);
	l->v[(l->head + l->count++) % l->cap] = (pending_t){fn, priv};
	return 0;
}

/* The oldest callback into *p; 0, or -1 when none waits. */
static inline int fifo_pop(link_fifo_t *l, pending_t *p)
{
	if (!l->count)
		return -1;
	/* FIFO pairing: the oldest command sent is the one answered. */
	SLUICE_ASSERT(l->count <= l->cap && l->head < l->cap);
	*p = l->v[l->head];
	l->head = (l->head + 1) % l->cap;
	l->count--;
	return 0;
}

#endif /* SLUICE_REDIS_LINK_FIFO_H */
