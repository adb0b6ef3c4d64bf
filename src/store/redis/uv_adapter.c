/*
 * uv_adapter.c -- hiredis on a libuv loop.
 *
 * The same glue as <hiredis/adapters/libuv.h>, with one fix that matters
 * here: the adapter shipped with hiredis 0.14 (Debian 12) ignores poll
 * errors, so a connect refused by a Redis that is still down is never
 * reported and each reconnect attempt hangs until our connect timeout.
 * On an error this adapter lets hiredis run its read/write path, which
 * finds the socket error and reports it (as later hiredis releases do).
 */
#include "store/redis/redis_int.h"

#include <stdlib.h>

typedef struct uv_events_s {
	redisAsyncContext *ac;
	uv_poll_t handle;
	int events;
} uv_events_t;

static void on_poll(uv_poll_t *h, int status, int events)
{
	uv_events_t *p = h->data;
	int ev = status ? p->events : events;

	if (p->ac && (ev & UV_READABLE))
		redisAsyncHandleRead(p->ac);
	if (p->ac && (ev & UV_WRITABLE))
		redisAsyncHandleWrite(p->ac);
}

static void update(uv_events_t *p, int add, int del)
{
	int events = (p->events | add) & ~del;

	/* hiredis asks for write interest on every command it queues; only
	 * a change of interest needs the kernel (epoll_ctl). */
	if (events == p->events)
		return;
	p->events = events;
	if (p->events)
		uv_poll_start(&p->handle, p->events, on_poll);
	else
		uv_poll_stop(&p->handle);
}

static void add_read(void *priv)
{
	update(priv, UV_READABLE, 0);
}

static void del_read(void *priv)
{
	update(priv, 0, UV_READABLE);
}

static void add_write(void *priv)
{
	update(priv, UV_WRITABLE, 0);
}

static void del_write(void *priv)
{
	update(priv, 0, UV_WRITABLE);
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

static void cleanup(void *priv)
{
	uv_events_t *p = priv;

	p->ac = NULL;
	uv_close((uv_handle_t *)&p->handle, on_closed);
}

int sluice_redis__attach(redisAsyncContext *ac, uv_loop_t *loop)
{
	uv_events_t *p;

	if (ac->ev.data)
		return -1;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -1;
	if (uv_poll_init_socket(loop, &p->handle, ac->c.fd) != 0) {
		free(p);
		return -1;
	}
	p->ac = ac;
	p->handle.data = p;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	ac->ev.data = p;
	return 0;
}
