/*
 * node.c -- connections to one Redis node: a link each (link.c, on the
 * caller's libuv loop), the handshake pipelined ahead of any decision
 * (AUTH, SELECT, ROLE under Sentinel, SCRIPT LOAD, module detection, then
 * a PING that marks it done), reconnection with a doubling backoff, idle
 * probing, and the node state changes reported to the host
 * (sluice_redis_opts_t.on_event).
 */
#include "store/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ lifecycle */

static void conn_schedule(sluice_redis_conn_t *k);

/* A failure of one connection: the node's state, its last error, and the
 * news for the topology (in Sentinel mode, a reason to ask where the
 * master is now). */
static void conn_failed(sluice_redis_conn_t *k, int health, const char *why)
{
	sluice_redis__node_error(k->node, why);
	sluice_redis__health(k->node, health, why);
	if (k->r->on_conn_failed)
		k->r->on_conn_failed(k->r, health, why);
}

static void on_timer(void *arg)
{
	sluice_redis_conn_t *k = arg;

	if (k->r->closing)
		return;
	if (k->state == CONN_DOWN) {
		sluice_redis__conn_start(k);
	} else if (k->state == CONN_CONNECTING) {
		uint64_t since;

		/* A loop held past the deadline may run this before it
		 * polls the socket: a connect done or answers waiting
		 * there are taken first (the server did its part; the
		 * host was slow).  And the server is judged on the time it
		 * had since the link last moved on (the connect seen done,
		 * a reply read), which a held loop may have noticed only
		 * just now: it gets the rest of a whole timeout from there.
		 * Replies are few in a handshake, so this ends. */
		(void)sluice_redis__link_poll(k->link);
		if (k->state != CONN_CONNECTING || !k->link)
			return; /* answered, or failed and told, meanwhile */
		since = k->link->progress_ns ? (sluice_redis__hrtime() -
						k->link->progress_ns) /
						       1000000
					     : SLUICE_REDIS_CONNECT_TIMEOUT_MS;
		if (since < SLUICE_REDIS_CONNECT_TIMEOUT_MS) {
			sluice_redis__timer_start(
				k->r, k->timer,
				SLUICE_REDIS_CONNECT_TIMEOUT_MS - since, 0);
			return;
		}
		/* Connect or handshake took too long: a node that accepts
		 * and never answers ends up here, and is retried as one
		 * that drops us after accepting (the longer backoff). */
		conn_failed(k, HEALTH_TIMEOUT,
			    "no answer to connect and handshake within "
			    "1000 ms");
		k->lost_early = k->link && k->link->reached;
		sluice_redis__conn_drop(k);
	}
}

/* The link connected (status 0), or failed or was lost: the commands on
 * it have had their callbacks (with NULL) already. */
static void on_link(sluice_redis_link_t *l, int status)
{
	sluice_redis_conn_t *k = l->data;
	int tls;

	if (!k || k->link != l || status == 0)
		return; /* up counts once the handshake is answered */
	/* A server that refused our TLS (no client certificate, say) may
	 * reset the connection before its alert is read: while the node's
	 * state is a TLS failure, a connection lost before its handshake
	 * was answered is the same failure, not news. */
	tls = l->tls_failed || (k->node->health == HEALTH_TLS &&
				k->state == CONN_CONNECTING && l->reached);
	if (tls && !l->tls_failed) {
		sluice_redis__report(k->r, k->node, SLUICE_REDIS_REPORT_ERROR,
				     0, SLUICE_REDIS_ERR_TLS);
	} else if (!k->hs_failed) {
		conn_failed(k, tls ? HEALTH_TLS : HEALTH_UNREACHABLE,
			    l->errstr[0] ? l->errstr : "connection lost");
		if (tls)
			sluice_redis__report(k->r, k->node,
					     SLUICE_REDIS_REPORT_ERROR, 0,
					     SLUICE_REDIS_ERR_TLS);
	}
	k->lost_early = k->state == CONN_CONNECTING && (l->reached || l->reset);
	l->data = NULL;
	k->link = NULL;
	k->inflight = 0;
	k->state = CONN_DOWN;
	conn_schedule(k);
}

/* Waits backoff_ms, then reconnects; the next wait is twice as long, up
 * to a cap that is longer after a refused handshake or TLS handshake, or
 * a connection the server dropped before answering the handshake (a
 * refused client certificate can come as a reset on the first write):
 * retrying a wrong password or a certificate that does not verify at
 * once only loads the server, each TLS handshake costs it a signature. */
static void conn_schedule(sluice_redis_conn_t *k)
{
	unsigned cap =
		k->hs_failed || k->lost_early || k->node->health == HEALTH_TLS
			? SLUICE_REDIS_HANDSHAKE_BACKOFF_MAX_MS
			: SLUICE_REDIS_BACKOFF_MAX_MS;

	k->probe_sent_ms = 0;
	if (k->r->closing)
		return;
	sluice_redis__timer_start(k->r, k->timer, k->backoff_ms, 0);
	k->backoff_ms *= 2;
	if (k->backoff_ms > cap)
		k->backoff_ms = cap;
}

/* Replies to handshake commands: an error here (wrong password, no such
 * db, scripts refused) makes the connection useless, so drop it and retry
 * after the handshake backoff. */
static void on_handshake(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	sluice_redis_conn_t *k = l->data;

	(void)priv;
	if (rep && rep->type == REDIS_REPLY_ERROR && k && k->link == l &&
	    !k->hs_failed) {
		k->hs_failed = 1;
		sluice_redis__node_error(k->node, rep->str);
		sluice_redis__health(k->node, HEALTH_AUTH, rep->str);
		sluice_redis__report(k->r, k->node, SLUICE_REDIS_REPORT_ERROR,
				     0, SLUICE_REDIS_ERR_AUTH);
		sluice_redis__conn_drop(k);
	}
}

/* Sentinel mode: the node the Sentinels named must say it is a master
 * (ROLE), else it is a demoted master or a replica not yet promoted:
 * drop the connection and ask the Sentinels again. */
static void on_role(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	sluice_redis_conn_t *k = l->data;

	(void)priv;
	if (!rep || !k || k->link != l || k->hs_failed)
		return;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    strcmp(rep->element[0]->str, "master") == 0)
		return;
	conn_failed(k, HEALTH_UNREACHABLE,
		    "ROLE: not a master (the Sentinels are asked again)");
	sluice_redis__conn_drop(k);
}

/* The PING that ends the handshake: every command before it answered
 * without error, so the connection is up and its backoff starts over. */
static void on_ready(sluice_redis_link_t *l, redisReply *reply, void *priv)
{
	sluice_redis_conn_t *k = l->data;

	(void)priv;
	if (!reply || !k || k->link != l || k->hs_failed ||
	    reply->type == REDIS_REPLY_ERROR)
		return;
	k->state = CONN_UP;
	k->lost_early = 0;
	k->backoff_ms = SLUICE_REDIS_BACKOFF_MIN_MS;
	k->last_reply_ms = sluice_redis__now(k->r);
	sluice_redis__timer_stop(k->r, k->timer);
	sluice_redis__health(k->node, HEALTH_UP, "");
	if (k->r->on_conn_up)
		k->r->on_conn_up(k->r);
}

void sluice_redis__conn_start(sluice_redis_conn_t *k)
{
	sluice_redis_node_t *n = k->node;
	sluice_redis_t *r = k->r;
	sluice_redis_link_t *l;

	if (!n->host && !n->path) {
		/* Sentinel: no master known yet; node_move() starts us. */
		k->state = CONN_DOWN;
		return;
	}
	l = sluice_redis__link_open(r, n->host, n->port, n->path, r->tls_nodes,
				    on_link);
	if (!l) {
		sluice_redis__node_error(n, "out of memory");
		k->state = CONN_DOWN;
		conn_schedule(k);
		return;
	}
	l->data = k;
	k->link = l;
	k->state = CONN_CONNECTING;
	k->module = -1;
	k->stuck = 0;
	k->hs_failed = 0;
	k->probe_sent_ms = 0;
	sluice_redis__timer_start(k->r, k->timer,
				  SLUICE_REDIS_CONNECT_TIMEOUT_MS, 0);

	/* The link buffers these until it is up; decisions queued after
	 * them are answered after them (one ordered pipeline). */
	if (r->url.pass && r->url.user)
		sluice_redis__command(l, on_handshake, NULL, "AUTH %s %s",
				      r->url.user, r->url.pass);
	else if (r->url.pass)
		sluice_redis__command(l, on_handshake, NULL, "AUTH %s",
				      r->url.pass);
	if (r->url.db && !r->cluster)
		sluice_redis__command(l, on_handshake, NULL, "SELECT %d",
				      r->url.db);
	if (r->sentinel)
		sluice_redis__command(l, on_role, NULL, "ROLE");
	sluice_redis__load_script(k, on_handshake);
	sluice_redis__check_eviction(k);
	if (!(r->flags & SLUICE_REDIS_SCRIPT_ONLY))
		sluice_redis__detect_module(k);
	else
		k->module = 0;
	sluice_redis__command(l, on_ready, NULL, "PING");
}

/* ------------------------------------------------------------- probing */

static void on_probe(sluice_redis_link_t *l, redisReply *reply, void *priv)
{
	sluice_redis_conn_t *k = l->data;

	(void)priv;
	if (!k || k->link != l)
		return;
	k->probe_sent_ms = 0;
	if (!reply)
		return;
	k->last_reply_ms = sluice_redis__now(k->r);
	sluice_redis__health(k->node, HEALTH_UP, "answering again");
}

/* Takes what every connection's socket holds now (sluice_redis__link_poll):
 * the replies a held loop has not read yet answer their calls before a
 * timer judges them late.  A reply may drop connections or change the
 * nodes (a cluster's new slots), so each is looked up afresh. */
void sluice_redis__poll_links(sluice_redis_t *r)
{
	size_t i;
	unsigned j;

	for (i = 0; i < r->nnodes && !r->closing; i++)
		for (j = 0; j < r->nconns && i < r->nnodes && !r->closing;
		     j++) {
			sluice_redis_conn_t *k = &r->nodes[i]->conns[j];

			if (k->link)
				(void)sluice_redis__link_poll(k->link);
		}
}

/* Every SLUICE_REDIS_PROBE_MS: a connection with no reply for that long
 * gets a PING (unless one is in flight); one whose PING went unanswered
 * for timeout_ms marks its node timing out.  Without this, a Redis that
 * accepts and never answers would look healthy to an idle server. */
static void on_probe_tick(void *arg)
{
	sluice_redis_t *r = arg;
	uint64_t now = sluice_redis__now(r);
	size_t i;
	unsigned j;

	/* A PING answered while the loop was held is answered. */
	sluice_redis__poll_links(r);
	if (r->closing)
		return;
	/* Every minute, each node's eviction policy again (it may have
	 * been changed by CONFIG SET without a reconnect). */
	if (++r->probe_ticks % (60000 / SLUICE_REDIS_PROBE_MS) == 0)
		for (i = 0; i < r->nnodes; i++)
			for (j = 0; j < r->nconns; j++)
				if (r->nodes[i]->conns[j].state == CONN_UP) {
					sluice_redis__check_eviction(
						&r->nodes[i]->conns[j]);
					break;
				}
	for (i = 0; i < r->nnodes; i++) {
		sluice_redis__report(r, r->nodes[i], SLUICE_REDIS_REPORT_GAUGES,
				     0, SLUICE_REDIS_ERR_NONE);
		/* A node refusing calls is asked again without traffic: an
		 * unready instance gets none, and would never see it fixed. */
		if (r->nodes[i]->refusals >= SLUICE_REDIS_BREAKER_FAILURES)
			r->probe_calls(r, r->nodes[i]);
	}
	for (i = 0; i < r->nnodes; i++)
		for (j = 0; j < r->nconns; j++) {
			sluice_redis_conn_t *k = &r->nodes[i]->conns[j];

			if (!k->link || k->state != CONN_UP)
				continue;
			if (k->probe_sent_ms) {
				if (now - k->probe_sent_ms > r->timeout_ms) {
					sluice_redis__node_error(
						k->node,
						"a PING went unanswered");
					sluice_redis__health(
						k->node, HEALTH_TIMEOUT,
						"a PING went unanswered");
				}
			} else if (now - k->last_reply_ms >=
				   SLUICE_REDIS_PROBE_MS) {
				if (sluice_redis__command(k->link, on_probe,
							  NULL, "PING") == 0)
					k->probe_sent_ms = now ? now : 1;
			}
		}
}

int sluice_redis__probe_start(sluice_redis_t *r)
{
	/* The probe alone must not keep a loop running (a Node.js process
	 * exits when nothing else is pending). */
	r->probe =
		sluice_redis__timer_new(r, on_probe_tick, r, SLUICE_LOOP_WEAK);
	if (!r->probe)
		return -1;
	sluice_redis__timer_start(r, r->probe, SLUICE_REDIS_PROBE_MS,
				  SLUICE_REDIS_PROBE_MS);
	return 0;
}

/* Closes the connection now: every command in flight gets its callback
 * with a NULL reply (its call fails unless already finished). */
void sluice_redis__conn_drop(sluice_redis_conn_t *k)
{
	sluice_redis_link_t *l = k->link;

	k->drop = 0;
	k->probe_sent_ms = 0;
	if (!l)
		return;
	k->link = NULL;
	k->inflight = 0;
	k->state = CONN_DOWN;
	l->data = NULL;
	sluice_redis__link_close(l);
	conn_schedule(k);
}

/* A connection that can take one more command, round robin. */
sluice_redis_conn_t *sluice_redis__pick(sluice_redis_node_t *n)
{
	unsigned i, nc = n->conns[0].r->nconns;

	for (i = 0; i < nc; i++) {
		sluice_redis_conn_t *k = &n->conns[(n->rr + i) % nc];

		if (k->link && k->state != CONN_DOWN && !k->drop &&
		    k->inflight < SLUICE_REDIS_MAX_INFLIGHT) {
			n->rr = (n->rr + i + 1) % nc;
			return k;
		}
	}
	return NULL;
}

int sluice_redis__node_saturated(const sluice_redis_node_t *n)
{
	unsigned i, nc = n->conns[0].r->nconns, full = 0;

	for (i = 0; i < nc; i++) {
		const sluice_redis_conn_t *k = &n->conns[i];

		if (!k->link || k->state == CONN_DOWN || k->drop)
			continue;
		if (k->inflight < SLUICE_REDIS_MAX_INFLIGHT)
			return 0;
		full++;
	}
	return full > 0;
}

/* ---------------------------------------------------------------- nodes */

sluice_redis_node_t *sluice_redis__node_new(sluice_redis_t *r, const char *host,
					    int port, const char *path)
{
	sluice_redis_node_t *n = calloc(1, sizeof(*n));
	unsigned i;

	if (!n)
		return NULL;
	n->conns = calloc(r->nconns, sizeof(*n->conns));
	n->host = host ? strdup(host) : NULL;
	n->path = path ? strdup(path) : NULL;
	n->port = port;
	n->evict = EVICT_UNCHECKED;
	n->index = r->nnodes; /* both callers append it at r->nodes[nnodes] */
	if (path)
		snprintf(n->name, sizeof(n->name), "%s", path);
	else
		snprintf(n->name, sizeof(n->name), "%s:%d", host ? host : "",
			 port);
	for (i = 0; n->conns && i < r->nconns; i++) {
		sluice_redis_conn_t *k = &n->conns[i];

		k->r = r;
		k->node = n;
		k->backoff_ms = SLUICE_REDIS_BACKOFF_MIN_MS;
		k->timer = sluice_redis__timer_new(
			r, on_timer, k,
			r->flags & SLUICE_REDIS_UNREF ? SLUICE_LOOP_WEAK : 0);
		if (!k->timer)
			break;
	}
	if (!n->conns || i < r->nconns || (host && !n->host) ||
	    (path && !n->path)) {
		/* The timers made go (each releases r's count once closed:
		 * their done needs r only, not n). */
		while (n->conns && i-- > 0)
			sluice_redis__timer_close(r, n->conns[i].timer);
		free(n->conns);
		free(n->host);
		free(n->path);
		free(n);
		return NULL;
	}
	for (i = 0; i < r->nconns; i++)
		sluice_redis__conn_start(&n->conns[i]);
	return n;
}

/* Closes a node's connections and timers; the memory goes once the loop
 * has closed the timers (conn_timer_closed). */
void sluice_redis__node_free(sluice_redis_node_t *n)
{
	unsigned i;

	for (i = 0; i < n->conns[0].r->nconns; i++) {
		sluice_redis_conn_t *k = &n->conns[i];

		if (k->link) {
			sluice_redis_link_t *l = k->link;

			k->link = NULL;
			l->data = NULL;
			sluice_redis__link_close(l);
		}
		sluice_redis__timer_close(k->r, k->timer);
		k->timer = NULL;
	}
}

int sluice_redis__node_move(sluice_redis_node_t *n, const char *host, int port)
{
	char *h = host ? strdup(host) : NULL;
	unsigned i;

	if (host && !h)
		return -1;
	free(n->host);
	n->host = h;
	n->port = port;
	for (i = 0; i < n->conns[0].r->nconns; i++) {
		sluice_redis_conn_t *k = &n->conns[i];

		/* Calls in flight on the old master are resent to the new one
		 * (call_answer): a write the old master makes once the
		 * Sentinels have promoted another is lost when it is made a
		 * replica, so the new master must decide them. */
		n->moving = 1;
		sluice_redis__conn_drop(k);
		n->moving = 0;
		sluice_redis__timer_stop(k->r, k->timer);
		k->backoff_ms = SLUICE_REDIS_BACKOFF_MIN_MS;
		sluice_redis__conn_start(k);
	}
	/* A new server: what the old one did says nothing of it. */
	n->breaker = BREAKER_CLOSED;
	n->failures = 0;
	n->probing = 0;
	n->refusals = 0;
	n->refusal[0] = '\0';
	return 0;
}
