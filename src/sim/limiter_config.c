/*
 * limiter_config.c -- a sluice config file as one more limiter the
 * simulator compares (a sluice_sim_policy_t).
 *
 * The generated request carries the headers its client would send
 * (x-user-id when signed in, user-agent) and its client address as the TCP
 * peer; rulestate.c decides it exactly as `sluice serve` would.
 */
#include "sim/rulestate.h"
#include "sim/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *sim_header(void *ctx, const char *name, size_t *len)
{
	const sluice_sim_client_t *c = ctx;
	const char *v = NULL;

	if (strcmp(name, "x-user-id") == 0 && c->user_id[0])
		v = c->user_id;
	else if (strcmp(name, "user-agent") == 0)
		v = c->agent;
	if (v)
		*len = strlen(v);
	return v;
}

static int cfg_take(sluice_sim_policy_t *p, const sluice_sim_trace_t *tr,
		    const sluice_sim_event_t *ev)
{
	const sluice_sim_client_t *cl = &tr->clients[ev->client];
	const sluice_sim_route_t *rt = &sluice_sim_routes[ev->route];
	const sluice_rule_hit_t *hits;
	sluice_request_t req;
	size_t n;

	memset(&req, 0, sizeof(req));
	req.method = rt->method;
	req.method_len = strlen(rt->method);
	req.path = rt->path;
	req.path_len = strlen(rt->path);
	req.header = sim_header;
	req.header_ctx = (void *)cl;
	req.peer = (const struct sockaddr *)&cl->addr;
	/* Out of memory fails open, as a store error would by default. */
	return sluice_rulestate_decide(p->impl, &req, ev->t_us, &hits, &n) != 0;
}

static void cfg_destroy(sluice_sim_policy_t *p)
{
	sluice_rulestate_free(p->impl);
	free(p->impl);
}

sluice_sim_policy_t *sluice_sim_config_policy(const sluice_config_t *cfg,
					      const char *name)
{
	sluice_sim_policy_t *p = calloc(1, sizeof(*p));
	sluice_rulestate_t *rs = calloc(1, sizeof(*rs));

	if (!p || !rs || sluice_rulestate_init(rs, cfg) < 0) {
		free(rs);
		free(p);
		return NULL;
	}
	snprintf(p->name, sizeof(p->name), "config:%s", name);
	p->take = cfg_take;
	p->destroy = cfg_destroy;
	p->impl = rs;
	return p;
}
