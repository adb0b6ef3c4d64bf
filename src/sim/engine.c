/*
 * engine.c -- replays a trace against policies and measures the outcome.
 *
 * Each policy sees every event in time order.  Besides the counts per
 * client class, the engine measures the boundary spike: the most requests
 * a single key got through in any 2-second span.  A token bucket bounds it
 * by capacity + rate x 2 s; a fixed window lets up to twice its limit
 * through around a window boundary.
 */
#include "sim/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC INT64_C(1000000)

/* One passed request, for the spike measurement. */
typedef struct {
	uint32_t key;
	int64_t t;
} pass_t;

static int cmp_pass(const void *a, const void *b)
{
	const pass_t *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (x->t > y->t) - (x->t < y->t);
}

uint64_t sluice_sim_max_in_span(const int64_t *t, size_t n, int64_t span_us,
				int64_t *start)
{
	size_t lo = 0, hi;
	uint64_t best = 0;

	for (hi = 0; hi < n; hi++) {
		while (t[hi] - t[lo] >= span_us)
			lo++;
		if (hi - lo + 1 > best) {
			best = hi - lo + 1;
			if (start)
				*start = t[lo];
		}
	}
	return best;
}

/* The spike over passes sorted by (key, time). */
static void spike(const pass_t *p, size_t n, sluice_sim_result_t *r)
{
	int64_t *t = malloc(n * sizeof(*t) + 1);
	size_t i = 0, j, k;

	if (!t)
		return;
	while (i < n) {
		int64_t at = 0;
		uint64_t m;

		for (j = i; j < n && p[j].key == p[i].key; j++)
			;
		for (k = i; k < j; k++)
			t[k - i] = p[k].t;
		m = sluice_sim_max_in_span(t, j - i, SLUICE_SIM_SPIKE_US, &at);
		if (m > r->spike) {
			r->spike = m;
			r->spike_key = p[i].key;
			r->spike_start_us = at;
		}
		i = j;
	}
	free(t);
}

void sluice_sim_result_free(sluice_sim_result_t *r)
{
	free(r->abuse_passed);
	free(r->legit_rejected_s);
	r->abuse_passed = r->legit_rejected_s = NULL;
}

int sluice_sim_run(const sluice_sim_trace_t *tr, sluice_sim_policy_t **policies,
		   size_t npolicies, sluice_sim_result_t *results)
{
	size_t nsec = (size_t)((tr->duration_us + SEC - 1) / SEC) + 1;
	size_t i, e;
	pass_t *passes = malloc(tr->nevents * sizeof(*passes) + 1);
	int err = 0;

	memset(results, 0, npolicies * sizeof(*results));
	if (!passes)
		return SLUICE_ENOMEM;
	for (i = 0; i < npolicies; i++) {
		sluice_sim_result_t *r = &results[i];
		sluice_sim_policy_t *p = policies[i];
		size_t npass = 0;

		snprintf(r->policy, sizeof(r->policy), "%s", p->name);
		r->nseconds = nsec;
		r->abuse_passed = calloc(nsec, sizeof(uint32_t));
		r->legit_rejected_s = calloc(nsec, sizeof(uint32_t));
		if (!r->abuse_passed || !r->legit_rejected_s) {
			err = SLUICE_ENOMEM;
			break;
		}
		for (e = 0; e < tr->nevents; e++) {
			const sluice_sim_event_t *ev = &tr->events[e];
			const sluice_sim_client_t *c = &tr->clients[ev->client];
			int ok = p->take(p, tr, ev);
			size_t s = (size_t)(ev->t_us / SEC);
			int abusive = c->cls == SLUICE_SIM_ABUSER;

			if (s >= nsec)
				s = nsec - 1;
			r->requests[c->cls]++;
			if (abusive)
				r->abuse++;
			else
				r->legit++;
			if (ok) {
				passes[npass].key = c->key;
				passes[npass].t = ev->t_us;
				npass++;
				if (abusive)
					r->abuse_passed[s]++;
				continue;
			}
			r->rejected[c->cls]++;
			if (abusive) {
				r->abuse_rejected++;
			} else {
				r->legit_rejected++;
				r->legit_rejected_s[s]++;
			}
		}
		qsort(passes, npass, sizeof(*passes), cmp_pass);
		spike(passes, npass, r);
	}
	free(passes);
	if (err)
		for (i = 0; i < npolicies; i++)
			sluice_sim_result_free(&results[i]);
	return err;
}
