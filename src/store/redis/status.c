/*
 * status.c -- what the client says about its nodes: the events for the
 * host (sluice_redis_opts_t.on_event), a node's health state (told once
 * per change), its last error in words, whether it can take calls, and
 * the reports for metrics (sluice_redis_opts_t.on_report).  Every other
 * file tells its news here; this file calls none of them.
 */
#include "store/redis/redis_int.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- events */

const char *sluice_redis_event_name(sluice_redis_event_kind_t kind)
{
	switch (kind) {
	case SLUICE_REDIS_EV_CONNECTED:
		return "connected";
	case SLUICE_REDIS_EV_AUTH_FAILED:
		return "auth_failed";
	case SLUICE_REDIS_EV_UNREACHABLE:
		return "unreachable";
	case SLUICE_REDIS_EV_TIMEOUT:
		return "timeout";
	case SLUICE_REDIS_EV_BREAKER_OPEN:
		return "breaker_open";
	case SLUICE_REDIS_EV_BREAKER_CLOSED:
		return "breaker_closed";
	case SLUICE_REDIS_EV_SCRIPT_RELOADED:
		return "script_reloaded";
	case SLUICE_REDIS_EV_SLOTS_CHANGED:
		return "slots_changed";
	case SLUICE_REDIS_EV_TLS_FAILED:
		return "tls_failed";
	case SLUICE_REDIS_EV_MASTER_CHANGED:
		return "master_changed";
	case SLUICE_REDIS_EV_NO_MASTER:
		return "no_master";
	case SLUICE_REDIS_EV_REFUSED:
		return "refused";
	case SLUICE_REDIS_EV_EVICTION:
		return "eviction_policy";
	}
	return "unknown";
}

void sluice_redis__event(sluice_redis_t *r, sluice_redis_node_t *n,
			 sluice_redis_event_kind_t kind, const char *detail)
{
	sluice_redis_event_t ev;

	if (!r->on_event || r->closing)
		return;
	ev.kind = kind;
	ev.node = n ? n->name : "";
	ev.detail = detail ? detail : "";
	r->on_event(r->event_arg, &ev);
}

void sluice_redis__health(sluice_redis_node_t *n, int health,
			  const char *detail)
{
	static const sluice_redis_event_kind_t kind[] = {
		[HEALTH_UP] = SLUICE_REDIS_EV_CONNECTED,
		[HEALTH_AUTH] = SLUICE_REDIS_EV_AUTH_FAILED,
		[HEALTH_UNREACHABLE] = SLUICE_REDIS_EV_UNREACHABLE,
		[HEALTH_TIMEOUT] = SLUICE_REDIS_EV_TIMEOUT,
		[HEALTH_TLS] = SLUICE_REDIS_EV_TLS_FAILED,
	};

	/* One report per change: a node refusing every reconnect for an
	 * hour is one line, not thousands. */
	if (n->health == health)
		return;
	n->health = health;
	sluice_redis__event(n->conns[0].r, n, kind[health], detail);
}

void sluice_redis__node_error(sluice_redis_node_t *n, const char *what)
{
	snprintf(n->last_error, sizeof(n->last_error), "%s", what);
}

/* ------------------------------------------------------------ health */

int sluice_redis__conn_usable(const sluice_redis_conn_t *k)
{
	return k->link && k->state == CONN_UP && !k->drop &&
	       !(k->probe_sent_ms &&
		 sluice_redis__now(k->r) - k->probe_sent_ms > k->r->timeout_ms);
}

/* A node can take calls: its breaker is not open (or its open time is
 * over, so the next call probes it) and a connection is usable (handshake
 * done, pings answered). */
int sluice_redis__node_healthy(const sluice_redis_t *r,
			       const sluice_redis_node_t *n)
{
	unsigned j;

	if (n->breaker == BREAKER_OPEN &&
	    sluice_redis__now(r) < n->open_until_ms)
		return 0;
	/* Up, and refusing every call: not a store that can decide. */
	if (n->refusals >= SLUICE_REDIS_BREAKER_FAILURES)
		return 0;
	for (j = 0; j < r->nconns; j++)
		if (sluice_redis__conn_usable(&n->conns[j]))
			return 1;
	return 0;
}

void sluice_redis__report(sluice_redis_t *r, sluice_redis_node_t *n,
			  sluice_redis_report_t what, uint64_t latency_ns,
			  sluice_redis_error_t error)
{
	sluice_redis_node_report_t rep;
	unsigned j;

	if (!r->on_report || r->closing || !n)
		return;
	rep.what = what;
	rep.node = n->name;
	rep.index = n->index;
	rep.up = sluice_redis__node_healthy(r, n);
	rep.breaker_open = n->breaker == BREAKER_OPEN;
	rep.connections = 0;
	for (j = 0; j < r->nconns; j++)
		rep.connections +=
			n->conns[j].link && n->conns[j].state == CONN_UP;
	rep.last_error = n->last_error;
	rep.eviction_unsafe = n->evict == EVICT_UNCHECKED ? -1 : n->evict;
	rep.latency_ns = latency_ns;
	rep.error = error;
	r->on_report(r->event_arg, &rep);
}
