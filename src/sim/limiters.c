/*
 * limiters.c -- the limiters sluice is compared with, and sluice itself.
 *
 * All four keep one state per classic key (x-user-id, else the client IP)
 * in a flat array, and count only the requests they let through (a
 * rejected request costs nothing, as in sluice).
 *
 *   fixed window     a counter per aligned window (e.g. each clock minute).
 *                    Cheap, but a client can pass `limit` at the end of one
 *                    window and `limit` again at the start of the next.
 *   sliding log      the time of every passed request in the last window:
 *                    exact, but memory grows with the limit.
 *   sliding counter  the previous window's count, weighted by how much of
 *                    it still overlaps the sliding window, plus the current
 *                    count (the approximation popularised by Cloudflare).
 *   token bucket     sluice_eval(), the decision function every sluice
 *                    store runs.
 */
#include "sim/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sluice_sim_policy_free(sluice_sim_policy_t *p)
{
	if (!p)
		return;
	if (p->destroy)
		p->destroy(p);
	free(p);
}

static sluice_sim_policy_t *policy_new(const char *name,
				       int (*take)(sluice_sim_policy_t *,
						   const sluice_sim_trace_t *,
						   const sluice_sim_event_t *),
				       void *impl)
{
	sluice_sim_policy_t *p;

	if (!impl)
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->take = take;
	p->impl = impl;
	return p;
}

static void destroy_impl(sluice_sim_policy_t *p)
{
	free(p->impl);
}

static uint32_t key_of(const sluice_sim_trace_t *tr,
		       const sluice_sim_event_t *ev)
{
	return tr->clients[ev->client].key;
}

/* ---------------------------------------------------------- fixed window */

typedef struct {
	uint32_t limit;
	int64_t window;
	struct fw_key {
		int64_t index; /* which window the count belongs to */
		uint32_t count;
	} keys[];
} fixed_t;

static int fixed_take(sluice_sim_policy_t *p, const sluice_sim_trace_t *tr,
		      const sluice_sim_event_t *ev)
{
	fixed_t *f = p->impl;
	struct fw_key *k = &f->keys[key_of(tr, ev)];
	int64_t w = ev->t_us / f->window;

	if (k->index != w) {
		k->index = w;
		k->count = 0;
	}
	if (k->count >= f->limit)
		return 0;
	k->count++;
	return 1;
}

sluice_sim_policy_t *sluice_sim_fixed_window(uint32_t limit, int64_t window_us,
					     size_t nkeys)
{
	fixed_t *f = calloc(1, sizeof(*f) + nkeys * sizeof(f->keys[0]));
	sluice_sim_policy_t *p;
	char name[64];

	if (f) {
		f->limit = limit;
		f->window = window_us;
	}
	snprintf(name, sizeof(name), "fixed_window");
	p = policy_new(name, fixed_take, f);
	if (p)
		p->destroy = destroy_impl;
	else
		free(f);
	return p;
}

/* ------------------------------------------------------ sliding log */

typedef struct {
	uint32_t limit;
	int64_t window;
	size_t nkeys;
	uint32_t *head, *count; /* ring of `limit` times per key */
	int64_t *times;
} slog_t;

static int slog_take(sluice_sim_policy_t *p, const sluice_sim_trace_t *tr,
		     const sluice_sim_event_t *ev)
{
	slog_t *s = p->impl;
	uint32_t k = key_of(tr, ev);
	int64_t *ring = s->times + (size_t)k * s->limit;

	/* Forget passes older than one window. */
	while (s->count[k] > 0 && ring[s->head[k]] <= ev->t_us - s->window) {
		s->head[k] = (s->head[k] + 1) % s->limit;
		s->count[k]--;
	}
	if (s->count[k] >= s->limit)
		return 0;
	ring[(s->head[k] + s->count[k]) % s->limit] = ev->t_us;
	s->count[k]++;
	return 1;
}

static void slog_destroy(sluice_sim_policy_t *p)
{
	slog_t *s = p->impl;

	free(s->head);
	free(s->count);
	free(s->times);
	free(s);
}

sluice_sim_policy_t *sluice_sim_sliding_log(uint32_t limit, int64_t window_us,
					    size_t nkeys)
{
	slog_t *s = calloc(1, sizeof(*s));
	sluice_sim_policy_t *p = NULL;

	if (s) {
		s->limit = limit;
		s->window = window_us;
		s->nkeys = nkeys;
		s->head = calloc(nkeys + 1, sizeof(*s->head));
		s->count = calloc(nkeys + 1, sizeof(*s->count));
		s->times =
			calloc((nkeys + 1) * (size_t)limit, sizeof(*s->times));
		if (s->head && s->count && s->times)
			p = policy_new("sliding_log", slog_take, s);
		if (p) {
			p->destroy = slog_destroy;
		} else {
			free(s->head);
			free(s->count);
			free(s->times);
			free(s);
		}
	}
	return p;
}

/* -------------------------------------------------- sliding counter */

typedef struct {
	uint32_t limit;
	int64_t window;
	struct sc_key {
		int64_t index;
		uint32_t cur, prev;
	} keys[];
} scount_t;

static int scount_take(sluice_sim_policy_t *p, const sluice_sim_trace_t *tr,
		       const sluice_sim_event_t *ev)
{
	scount_t *s = p->impl;
	struct sc_key *k = &s->keys[key_of(tr, ev)];
	int64_t w = ev->t_us / s->window;
	int64_t into = ev->t_us - w * s->window;
	uint64_t weighted;

	if (k->index != w) {
		k->prev = k->index == w - 1 ? k->cur : 0;
		k->cur = 0;
		k->index = w;
	}
	/* Estimate prev * (window - into) / window + cur < limit, scaled by
	 * window to stay in integers. */
	weighted = (uint64_t)k->prev * (uint64_t)(s->window - into) +
		   (uint64_t)k->cur * (uint64_t)s->window;
	if (weighted >= (uint64_t)s->limit * (uint64_t)s->window)
		return 0;
	k->cur++;
	return 1;
}

sluice_sim_policy_t *sluice_sim_sliding_counter(uint32_t limit,
						int64_t window_us, size_t nkeys)
{
	scount_t *s = calloc(1, sizeof(*s) + nkeys * sizeof(s->keys[0]));
	sluice_sim_policy_t *p;

	if (s) {
		s->limit = limit;
		s->window = window_us;
	}
	p = policy_new("sliding_counter", scount_take, s);
	if (p)
		p->destroy = destroy_impl;
	else
		free(s);
	return p;
}

/* ----------------------------------------------------- token bucket */

typedef struct {
	sluice_limit_t limit;
	sluice_state_t states[];
} bucket_t;

static int bucket_take(sluice_sim_policy_t *p, const sluice_sim_trace_t *tr,
		       const sluice_sim_event_t *ev)
{
	bucket_t *b = p->impl;
	sluice_state_t *st = &b->states[key_of(tr, ev)];
	sluice_decision_t d;

	sluice_eval(&b->limit, *st, ev->t_us, 1, st, &d);
	return d.allowed;
}

sluice_sim_policy_t *sluice_sim_token_bucket(const sluice_limit_t *limit,
					     size_t nkeys)
{
	bucket_t *b = calloc(1, sizeof(*b) + nkeys * sizeof(b->states[0]));
	sluice_sim_policy_t *p;

	if (b)
		b->limit = *limit;
	p = policy_new("sluice_token_bucket", bucket_take, b);
	if (p)
		p->destroy = destroy_impl;
	else
		free(b);
	return p;
}
