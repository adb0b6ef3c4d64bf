/*
 * conn.c -- connections to one Redis node: non-blocking connect (hiredis on
 * the caller's libuv loop), the handshake pipelined ahead of any decision
 * (AUTH, SELECT, SCRIPT LOAD, module detection, then a PING that marks
 * it done), reconnection with a doubling backoff, idle probing, and the
 * node state changes reported to the host (sluice_redis_opts_t.on_event).
 */
#include "store/redis/redis_int.h"

#include <stdio.h>
#include <stdlib.h>
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
	};

	/* One report per change: a node refusing every reconnect for an
	 * hour is one line, not thousands. */
	if (n->health == health)
		return;
	n->health = health;
	sluice_redis__event(n->conns[0].r, n, kind[health], detail);
}

/* ------------------------------------------------------------ lifecycle */

static void conn_schedule(sluice_redis_conn_t *k);

static void on_timer(uv_timer_t *t)
{
	sluice_redis_conn_t *k = t->data;

	if (k->r->closing)
		return;
	if (k->state == CONN_DOWN) {
		sluice_redis__conn_start(k);
	} else if (k->state == CONN_CONNECTING) {
		/* Connect or handshake took too long: a node that accepts
		 * and never answers ends up here. */
		sluice_redis__health(k->node, HEALTH_TIMEOUT,
				     "no answer to connect and handshake "
				     "within 1000 ms");
		sluice_redis__conn_drop(k);
	}
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	sluice_redis_conn_t *k = ac->data;

	if (!k || k->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees the context after this callback, failing
		 * the commands queued on it. */
		sluice_redis__health(k->node, HEALTH_UNREACHABLE, ac->errstr);
		k->ac = NULL;
		k->inflight = 0;
		k->state = CONN_DOWN;
		conn_schedule(k);
	}
	/* Connected at the TCP level only: the connection counts as up
	 * once the handshake is answered (on_ready). */
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	sluice_redis_conn_t *k = ac->data;

	if (!k || k->ac != ac)
		return;
	if (status != REDIS_OK && !k->hs_failed)
		sluice_redis__health(k->node, HEALTH_UNREACHABLE,
				     ac->errstr[0] ? ac->errstr
						   : "connection lost");
	k->ac = NULL;
	k->inflight = 0;
	k->state = CONN_DOWN;
	conn_schedule(k);
}

/* Waits backoff_ms, then reconnects; the next wait is twice as long, up
 * to a cap that is longer after a refused handshake (retrying a wrong
 * password at once only loads the server). */
static void conn_schedule(sluice_redis_conn_t *k)
{
	unsigned cap = k->hs_failed ? SLUICE_REDIS_HANDSHAKE_BACKOFF_MAX_MS
				    : SLUICE_REDIS_BACKOFF_MAX_MS;

	k->probe_sent_ms = 0;
	if (k->r->closing)
		return;
	uv_timer_start(&k->timer, on_timer, k->backoff_ms, 0);
	k->backoff_ms *= 2;
	if (k->backoff_ms > cap)
		k->backoff_ms = cap;
}

/* Replies to handshake commands: an error here (wrong password, no such
 * db, scripts refused) makes the connection useless, so drop it and retry
 * after the handshake backoff. */
static void on_handshake(redisAsyncContext *ac, void *reply, void *priv)
{
	redisReply *rep = reply;
	sluice_redis_conn_t *k = ac->data;

	(void)priv;
	if (rep && rep->type == REDIS_REPLY_ERROR && k && k->ac == ac &&
	    !k->hs_failed) {
		k->hs_failed = 1;
		sluice_redis__health(k->node, HEALTH_AUTH, rep->str);
		sluice_redis__report(k->r, k->node, SLUICE_REDIS_REPORT_ERROR,
				     0, SLUICE_REDIS_ERR_AUTH);
		redisAsyncFree(ac);
	}
}

/* The PING that ends the handshake: every command before it answered
 * without error, so the connection is up and its backoff starts over. */
static void on_ready(redisAsyncContext *ac, void *reply, void *priv)
{
	sluice_redis_conn_t *k = ac->data;

	(void)priv;
	if (!reply || !k || k->ac != ac || k->hs_failed ||
	    ((redisReply *)reply)->type == REDIS_REPLY_ERROR)
		return;
	k->state = CONN_UP;
	k->backoff_ms = SLUICE_REDIS_BACKOFF_MIN_MS;
	k->last_reply_ms = uv_now(k->r->loop);
	uv_timer_stop(&k->timer);
	sluice_redis__health(k->node, HEALTH_UP, "");
	sluice_redis__slots_check(k->r);
}

void sluice_redis__conn_start(sluice_redis_conn_t *k)
{
	sluice_redis_node_t *n = k->node;
	sluice_redis_t *r = k->r;
	redisAsyncContext *ac;

	ac = n->path ? redisAsyncConnectUnix(n->path)
		     : redisAsyncConnect(n->host, n->port);
	if (!ac || ac->err) {
		sluice_redis__health(n, HEALTH_UNREACHABLE,
				     ac ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		k->state = CONN_DOWN;
		conn_schedule(k);
		return;
	}
	if (sluice_redis__attach(ac, r->loop) < 0) {
		redisAsyncFree(ac);
		k->state = CONN_DOWN;
		conn_schedule(k);
		return;
	}
	ac->data = k;
	k->ac = ac;
	k->state = CONN_CONNECTING;
	k->module = -1;
	k->stuck = 0;
	k->hs_failed = 0;
	k->probe_sent_ms = 0;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	uv_timer_start(&k->timer, on_timer, SLUICE_REDIS_CONNECT_TIMEOUT_MS, 0);

	/* hiredis buffers these until the socket connects; decisions queued
	 * after them are answered after them (one ordered pipeline). */
	if (r->url.pass && r->url.user)
		redisAsyncCommand(ac, on_handshake, NULL, "AUTH %s %s",
				  r->url.user, r->url.pass);
	else if (r->url.pass)
		redisAsyncCommand(ac, on_handshake, NULL, "AUTH %s",
				  r->url.pass);
	if (r->url.db && !r->cluster)
		redisAsyncCommand(ac, on_handshake, NULL, "SELECT %d",
				  r->url.db);
	sluice_redis__load_script(k, on_handshake);
	if (!(r->flags & SLUICE_REDIS_SCRIPT_ONLY))
		sluice_redis__detect_module(k);
	else
		k->module = 0;
	redisAsyncCommand(ac, on_ready, NULL, "PING");
}

/* ------------------------------------------------------------- probing */

int sluice_redis__conn_usable(const sluice_redis_conn_t *k)
{
	return k->ac && k->state == CONN_UP && !k->drop &&
	       !(k->probe_sent_ms &&
		 uv_now(k->r->loop) - k->probe_sent_ms > k->r->timeout_ms);
}

static void on_probe(redisAsyncContext *ac, void *reply, void *priv)
{
	sluice_redis_conn_t *k = ac->data;
	sluice_redis_node_t *n;

	(void)priv;
	if (!k || k->ac != ac)
		return;
	k->probe_sent_ms = 0;
	if (!reply)
		return;
	n = k->node;
	k->last_reply_ms = uv_now(k->r->loop);
	sluice_redis__health(n, HEALTH_UP, "answering again");
}

/* Every SLUICE_REDIS_PROBE_MS: a connection with no reply for that long
 * gets a PING (unless one is in flight); one whose PING went unanswered
 * for timeout_ms marks its node timing out.  Without this, a Redis that
 * accepts and never answers would look healthy to an idle server. */
static void on_probe_tick(uv_timer_t *t)
{
	sluice_redis_t *r = t->data;
	uint64_t now = uv_now(r->loop);
	size_t i;
	unsigned j;

	for (i = 0; i < r->nnodes; i++)
		sluice_redis__report(r, r->nodes[i], SLUICE_REDIS_REPORT_GAUGES,
				     0, SLUICE_REDIS_ERR_NONE);
	for (i = 0; i < r->nnodes; i++)
		for (j = 0; j < r->nconns; j++) {
			sluice_redis_conn_t *k = &r->nodes[i]->conns[j];

			if (!k->ac || k->state != CONN_UP)
				continue;
			if (k->probe_sent_ms) {
				if (now - k->probe_sent_ms > r->timeout_ms)
					sluice_redis__health(
						k->node, HEALTH_TIMEOUT,
						"a PING went unanswered");
			} else if (now - k->last_reply_ms >=
				   SLUICE_REDIS_PROBE_MS) {
				if (redisAsyncCommand(k->ac, on_probe, NULL,
						      "PING") == REDIS_OK)
					k->probe_sent_ms = now ? now : 1;
			}
		}
}

void sluice_redis__probe_start(sluice_redis_t *r)
{
	uv_timer_start(&r->probe, on_probe_tick, SLUICE_REDIS_PROBE_MS,
		       SLUICE_REDIS_PROBE_MS);
}

/* Closes the connection now: every command in flight gets its callback
 * with a NULL reply (its call fails unless already finished). */
void sluice_redis__conn_drop(sluice_redis_conn_t *k)
{
	redisAsyncContext *ac = k->ac;

	k->drop = 0;
	k->probe_sent_ms = 0;
	if (!ac)
		return;
	k->ac = NULL;
	k->inflight = 0;
	k->state = CONN_DOWN;
	ac->data = NULL;
	redisAsyncFree(ac);
	conn_schedule(k);
}

/* A connection that can take one more command, round robin. */
sluice_redis_conn_t *sluice_redis__pick(sluice_redis_node_t *n)
{
	unsigned i, nc = n->conns[0].r->nconns;

	for (i = 0; i < nc; i++) {
		sluice_redis_conn_t *k = &n->conns[(n->rr + i) % nc];

		if (k->ac && k->state != CONN_DOWN && !k->drop &&
		    k->inflight < SLUICE_REDIS_MAX_INFLIGHT) {
			n->rr = (n->rr + i + 1) % nc;
			return k;
		}
	}
	return NULL;
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
	n->index = r->nnodes; /* both callers append it at r->nodes[nnodes] */
	if (path)
		snprintf(n->name, sizeof(n->name), "%s", path);
	else
		snprintf(n->name, sizeof(n->name), "%s:%d", host ? host : "",
			 port);
	if (!n->conns || (host && !n->host) || (path && !n->path)) {
		free(n->conns);
		free(n->host);
		free(n->path);
		free(n);
		return NULL;
	}
	for (i = 0; i < r->nconns; i++) {
		sluice_redis_conn_t *k = &n->conns[i];

		k->r = r;
		k->node = n;
		k->backoff_ms = SLUICE_REDIS_BACKOFF_MIN_MS;
		uv_timer_init(r->loop, &k->timer);
		k->timer.data = k;
		r->open_handles++;
		sluice_redis__conn_start(k);
	}
	return n;
}

/* Closes a node's connections and timers; the memory goes once the loop
 * has closed the timers (sluice_redis__handle_closed). */
void sluice_redis__node_free(sluice_redis_node_t *n)
{
	unsigned i;

	for (i = 0; i < n->conns[0].r->nconns; i++) {
		sluice_redis_conn_t *k = &n->conns[i];

		if (k->ac) {
			redisAsyncContext *ac = k->ac;

			k->ac = NULL;
			ac->data = NULL;
			redisAsyncFree(ac);
		}
		uv_timer_stop(&k->timer);
		uv_close((uv_handle_t *)&k->timer, sluice_redis__handle_closed);
	}
}
