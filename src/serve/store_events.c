/*
 * store_events.c -- the stores' events in the server's log (each change
 * said once for the process) and the Redis clients' reports in its
 * metrics (store/store_redis_metrics.c counts and renders them).
 */
#include "serve/store_events.h"
#include "serve/metrics.h"
#include "store/store_redis_metrics.h"
#include "util/log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------ store health log */

/* Each thread's client reports its own nodes' changes; the log says each
 * change once for the process, so N threads watching one refused password
 * (or one certificate that does not verify) write one line, not N, and a
 * node that keeps failing the same way is not logged at each reconnect.
 * Keyed by node: the last connection state and breaker state written. */
#define LOG_NODES 64

static struct {
	char node[80];
	/* last CONNECTED/AUTH_FAILED/UNREACHABLE/TIMEOUT/TLS_FAILED */
	int state;
	int breaker; /* last BREAKER_OPEN/CLOSED */
	/* the server's words last logged for REFUSED: each thread's client
	 * reports a refusal on its own; one line says it */
	char refused[160];
	char eviction[256]; /* the same for EVICTION */
} log_nodes[LOG_NODES];

/* Sentinel: what the log last said of the master (one group per
 * process): MASTER_CHANGED with the master's node, or NO_MASTER.  Every
 * thread's client learns of a failover on its own; one line says it. */
static struct {
	int kind;
	char node[80];
} log_master;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

/* 1 when a Sentinel event changes what the log last said of the master
 * (log_lock held). */
static int master_is_news(const sluice_redis_event_t *ev)
{
	int news;

	news = log_master.kind != (int)ev->kind ||
	       (ev->kind == SLUICE_REDIS_EV_MASTER_CHANGED &&
		strncmp(log_master.node, ev->node,
			sizeof(log_master.node) - 1) != 0);
	log_master.kind = (int)ev->kind;
	snprintf(log_master.node, sizeof(log_master.node), "%s", ev->node);
	return news;
}

/* 1 when the event changes what the log last said about its node
 * (log_lock held). */
static int log_is_news(const sluice_redis_event_t *ev)
{
	int kind = (int)ev->kind, *slot = NULL, news = 1;
	size_t i;

	if (kind == SLUICE_REDIS_EV_SCRIPT_RELOADED ||
	    kind == SLUICE_REDIS_EV_SLOTS_CHANGED)
		return 1; /* events, already throttled by the client */
	if (kind == SLUICE_REDIS_EV_MASTER_CHANGED ||
	    kind == SLUICE_REDIS_EV_NO_MASTER)
		return master_is_news(ev);
	for (i = 0; i < LOG_NODES; i++) {
		if (!log_nodes[i].node[0])
			snprintf(log_nodes[i].node, sizeof(log_nodes[i].node),
				 "%s", ev->node);
		if (strncmp(log_nodes[i].node, ev->node,
			    sizeof(log_nodes[i].node) - 1) == 0)
			break;
	}
	if (i < LOG_NODES && (kind == SLUICE_REDIS_EV_REFUSED ||
			      kind == SLUICE_REDIS_EV_EVICTION)) {
		char *said = kind == SLUICE_REDIS_EV_REFUSED
				     ? log_nodes[i].refused
				     : log_nodes[i].eviction;
		size_t len = kind == SLUICE_REDIS_EV_REFUSED
				     ? sizeof(log_nodes[i].refused)
				     : sizeof(log_nodes[i].eviction);

		news = strncmp(said, ev->detail, len - 1) != 0;
		snprintf(said, len, "%s", ev->detail);
	} else if (i < LOG_NODES) {
		if (kind == SLUICE_REDIS_EV_BREAKER_CLOSED ||
		    kind == SLUICE_REDIS_EV_CONNECTED)
			log_nodes[i].refused[0] = '\0'; /* say it again */
		slot = kind == SLUICE_REDIS_EV_BREAKER_OPEN ||
				       kind == SLUICE_REDIS_EV_BREAKER_CLOSED
			       ? &log_nodes[i].breaker
			       : &log_nodes[i].state;
		news = *slot != kind;
		*slot = kind;
	}
	return news;
}

static void say(const sluice_redis_event_t *ev, const char *name)
{
	switch (ev->kind) {
	case SLUICE_REDIS_EV_CONNECTED:
	case SLUICE_REDIS_EV_BREAKER_CLOSED:
	case SLUICE_REDIS_EV_SLOTS_CHANGED:
	case SLUICE_REDIS_EV_SCRIPT_RELOADED:
	case SLUICE_REDIS_EV_MASTER_CHANGED:
		sluice_log_info("redis %s: %s%s%s", ev->node, name,
				ev->detail[0] ? ": " : "", ev->detail);
		break;
	case SLUICE_REDIS_EV_AUTH_FAILED:
	case SLUICE_REDIS_EV_REFUSED:
		/* The words were redacted as they were read (no AUTH
		 * arguments echoed back reach the log). */
		sluice_log_error("redis %s: %s: the server said \"%s\"",
				 ev->node, name, ev->detail);
		break;
	case SLUICE_REDIS_EV_TLS_FAILED:
		/* Usually a configuration matter (CA, server name, client
		 * certificate) that retrying will not fix: an error. */
		sluice_log_error("redis %s: %s: %s", ev->node, name,
				 ev->detail[0] ? ev->detail
					       : "the TLS handshake failed");
		break;
	default:
		sluice_log_warn("redis %s: %s%s%s", ev->node, name,
				ev->detail[0] ? ": " : "", ev->detail);
		break;
	}
}

static void on_store_event(void *arg, const sluice_redis_event_t *ev)
{
	const char *name = sluice_redis_event_name(ev->kind);

	(void)arg;
	/* The line is written under the lock that decided it is news: a
	 * thread told "already said" returns only once it is in the log (its
	 * own client may then answer /readyz 200 for a "connected" another
	 * thread is still writing), and two threads' lines about one node
	 * reach the log in the order the table took them, so its last line
	 * is the node's last state. */
	pthread_mutex_lock(&log_lock);
	if (log_is_news(ev))
		say(ev, name);
	pthread_mutex_unlock(&log_lock);
}

/* ----------------------------------------------------------------- hooks */

static void log_error(const char *msg)
{
	sluice_log_error("%s", msg);
}

static void *attach(void)
{
	return sluice_redis_metrics_new();
}

static void detach(void *arg)
{
	sluice_redis_metrics_retire(arg);
}

static const sluice_store_hooks_t hooks = {
	.log_error = log_error,
	.on_event = on_store_event,
	.on_report = sluice_redis_metrics_report,
	.attach = attach,
	.detach = detach,
};

void sluice_serve_store_events(void)
{
	sluice_store_set_hooks(&hooks);
	/* Redis nodes' series (none until a Redis client reports one). */
	sluice_metrics_set_store(&sluice_redis_exposition);
}
