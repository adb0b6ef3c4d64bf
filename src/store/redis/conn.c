/*
 * conn.c -- connections to one Redis node: non-blocking connect (hiredis on
 * the caller's libuv loop), the handshake pipelined ahead of any decision
 * (AUTH, SELECT, SCRIPT LOAD, module detection), and reconnection with a
 * doubling backoff capped at SLUICE_REDIS_BACKOFF_MAX_MS.
 */
#include "store/redis/redis_int.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ lifecycle */

static void conn_schedule(sluice_redis_conn_t *k);

static void on_timer(uv_timer_t *t)
{
	sluice_redis_conn_t *k = t->data;

	if (k->r->closing)
		return;
	if (k->state == CONN_DOWN)
		sluice_redis__conn_start(k);
	else if (k->state == CONN_CONNECTING)
		sluice_redis__conn_drop(k); /* connect took too long */
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	sluice_redis_conn_t *k = ac->data;

	if (!k || k->ac != ac)
		return;
	if (status != REDIS_OK) {
		/* hiredis frees the context after this callback, failing
		 * the commands queued on it. */
		k->ac = NULL;
		k->inflight = 0;
		k->state = CONN_DOWN;
		conn_schedule(k);
		return;
	}
	k->state = CONN_UP;
	k->backoff_ms = SLUICE_REDIS_BACKOFF_MIN_MS;
	uv_timer_stop(&k->timer);
	sluice_redis__slots_check(k->r);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	sluice_redis_conn_t *k = ac->data;

	if (!k || k->ac != ac)
		return;
	k->ac = NULL;
	k->inflight = 0;
	k->state = CONN_DOWN;
	conn_schedule(k);
}

/* Waits backoff_ms, then reconnects; the next wait is twice as long. */
static void conn_schedule(sluice_redis_conn_t *k)
{
	if (k->r->closing)
		return;
	uv_timer_start(&k->timer, on_timer, k->backoff_ms, 0);
	k->backoff_ms *= 2;
	if (k->backoff_ms > SLUICE_REDIS_BACKOFF_MAX_MS)
		k->backoff_ms = SLUICE_REDIS_BACKOFF_MAX_MS;
}

/* Replies to handshake commands: an error here (wrong password, no such
 * db) makes the connection useless, so drop it and retry later. */
static void on_handshake(redisAsyncContext *ac, void *reply, void *priv)
{
	redisReply *rep = reply;
	sluice_redis_conn_t *k = ac->data;

	if (rep && rep->type == REDIS_REPLY_ERROR && k && k->ac == ac)
		redisAsyncFree(ac);
}

void sluice_redis__conn_start(sluice_redis_conn_t *k)
{
	sluice_redis_node_t *n = k->node;
	sluice_redis_t *r = k->r;
	redisAsyncContext *ac;

	ac = n->path ? redisAsyncConnectUnix(n->path)
		     : redisAsyncConnect(n->host, n->port);
	if (!ac || ac->err) {
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
	sluice_redis__load_script(k);
	if (!(r->flags & SLUICE_REDIS_SCRIPT_ONLY))
		sluice_redis__detect_module(k);
	else
		k->module = 0;
}

/* Closes the connection now: every command in flight gets its callback
 * with a NULL reply (its call fails unless already finished). */
void sluice_redis__conn_drop(sluice_redis_conn_t *k)
{
	redisAsyncContext *ac = k->ac;

	k->drop = 0;
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
