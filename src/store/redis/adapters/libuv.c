/*
 * adapters/libuv.c -- the Redis client's loop (sluice_loop.h) on libuv: what
 * `sluice serve` and the Node addon run it on.
 *
 * Each handle of the interface is one libuv handle: a timer a uv_timer_t,
 * an end-of-turn hook a uv_prepare_t (or, SLUICE_LOOP_AFTER_IO, a
 * uv_check_t: libuv runs check handles right after the poll phase), a
 * socket's readiness a uv_poll_t (epoll, level-triggered, as libuv's own
 * streams watch theirs).  A handle is allocated once, when the client
 * makes it; starting and stopping it allocate nothing.
 */
#include "sluice_redis.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct uvloop_s {
	sluice_loop_t base; /* first: the client's view */
	uv_loop_t *uv;
} uvloop_t;

/* One handle of any kind; the interface's opaque types are this. */
typedef struct uvh_s {
	union {
		uv_handle_t h;
		uv_timer_t timer;
		uv_prepare_t prepare;
		uv_check_t check;
		uv_poll_t poll;
	} u;
	sluice_loop_fn *fn;
	sluice_loop_io_fn *io_fn;
	void *arg;
	sluice_loop_fn *done; /* after close */
	void *done_arg;
	int check; /* a hook on a uv_check_t */
} uvh_t;

struct sluice_loop_timer_s {
	uvh_t x;
};
struct sluice_loop_hook_s {
	uvh_t x;
};
struct sluice_loop_io_s {
	uvh_t x;
};

static uv_loop_t *uv_of(sluice_loop_t *loop)
{
	return ((uvloop_t *)loop)->uv;
}

static uvh_t *handle_new(sluice_loop_fn *fn, void *arg)
{
	uvh_t *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->fn = fn;
	x->arg = arg;
	x->u.h.data = x;
	return x;
}

/* The handle is closed: its memory goes, then the owner hears (the owner
 * may free the loop itself from done). */
static void on_closed(uv_handle_t *h)
{
	uvh_t *x = h->data;
	sluice_loop_fn *done = x->done;
	void *arg = x->done_arg;

	free(x);
	if (done)
		done(arg);
}

static void handle_close(uvh_t *x, sluice_loop_fn *done, void *arg)
{
	x->done = done;
	x->done_arg = arg;
	uv_close(&x->u.h, on_closed);
}

/* ---------------------------------------------------------------- clock */

static uint64_t uvl_now(sluice_loop_t *loop)
{
	return uv_now(uv_of(loop));
}

/* --------------------------------------------------------------- timers */

static void on_timer(uv_timer_t *t)
{
	uvh_t *x = t->data;

	x->fn(x->arg);
}

static sluice_loop_timer_t *uvl_timer_new(sluice_loop_t *loop,
					  sluice_loop_fn *fn, void *arg,
					  unsigned flags)
{
	uvh_t *x = handle_new(fn, arg);

	if (!x)
		return NULL;
	uv_timer_init(uv_of(loop), &x->u.timer);
	if (flags & SLUICE_LOOP_WEAK)
		uv_unref(&x->u.h);
	return (sluice_loop_timer_t *)x;
}

static void uvl_timer_start(sluice_loop_timer_t *t, uint64_t ms,
			    uint64_t repeat_ms)
{
	uv_timer_start(&t->x.u.timer, on_timer, ms, repeat_ms);
}

static void uvl_timer_stop(sluice_loop_timer_t *t)
{
	uv_timer_stop(&t->x.u.timer);
}

static int uvl_timer_active(const sluice_loop_timer_t *t)
{
	return uv_is_active(&t->x.u.h);
}

static void uvl_timer_close(sluice_loop_timer_t *t, sluice_loop_fn *done,
			    void *arg)
{
	uv_timer_stop(&t->x.u.timer);
	handle_close(&t->x, done, arg);
}

/* ---------------------------------------------------------------- hooks */

static void on_prepare(uv_prepare_t *p)
{
	uvh_t *x = p->data;

	x->fn(x->arg);
}

static void on_check(uv_check_t *c)
{
	uvh_t *x = c->data;

	x->fn(x->arg);
}

static sluice_loop_hook_t *uvl_hook_new(sluice_loop_t *loop, sluice_loop_fn *fn,
					void *arg, unsigned flags)
{
	uvh_t *x = handle_new(fn, arg);

	if (!x)
		return NULL;
	x->check = (flags & SLUICE_LOOP_AFTER_IO) != 0;
	if (x->check)
		uv_check_init(uv_of(loop), &x->u.check);
	else
		uv_prepare_init(uv_of(loop), &x->u.prepare);
	/* A hook only finishes what other handles started. */
	uv_unref(&x->u.h);
	return (sluice_loop_hook_t *)x;
}

static void uvl_hook_start(sluice_loop_hook_t *h)
{
	if (h->x.check)
		uv_check_start(&h->x.u.check, on_check);
	else
		uv_prepare_start(&h->x.u.prepare, on_prepare);
}

static void uvl_hook_stop(sluice_loop_hook_t *h)
{
	if (h->x.check)
		uv_check_stop(&h->x.u.check);
	else
		uv_prepare_stop(&h->x.u.prepare);
}

static int uvl_hook_active(const sluice_loop_hook_t *h)
{
	return uv_is_active(&h->x.u.h);
}

/* libuv runs the handles of a kind last started first: started again, h
 * comes before any started since. */
static void uvl_hook_first(sluice_loop_hook_t *h)
{
	if (!uv_is_active(&h->x.u.h))
		return;
	uvl_hook_stop(h);
	uvl_hook_start(h);
}

static void uvl_hook_close(sluice_loop_hook_t *h, sluice_loop_fn *done,
			   void *arg)
{
	uvl_hook_stop(h);
	handle_close(&h->x, done, arg);
}

/* -------------------------------------------------------------- sockets */

static void on_poll(uv_poll_t *p, int status, int events)
{
	uvh_t *x = p->data;
	int ev = 0;

	if (status < 0)
		ev = SLUICE_LOOP_READABLE | SLUICE_LOOP_WRITABLE;
	if (events & UV_READABLE)
		ev |= SLUICE_LOOP_READABLE;
	if (events & UV_WRITABLE)
		ev |= SLUICE_LOOP_WRITABLE;
	x->io_fn(x->arg, ev);
}

static sluice_loop_io_t *uvl_io_new(sluice_loop_t *loop, int fd,
				    sluice_loop_io_fn *fn, void *arg,
				    unsigned flags)
{
	uvh_t *x = handle_new(NULL, arg);

	if (!x)
		return NULL;
	x->io_fn = fn;
	if (uv_poll_init_socket(uv_of(loop), &x->u.poll, fd) < 0) {
		free(x);
		return NULL;
	}
	x->u.h.data = x;
	if (flags & SLUICE_LOOP_WEAK)
		uv_unref(&x->u.h);
	return (sluice_loop_io_t *)x;
}

static int uvl_io_watch(sluice_loop_io_t *io, int events)
{
	int ev = 0;

	if (!events)
		return uv_poll_stop(&io->x.u.poll);
	if (events & SLUICE_LOOP_READABLE)
		ev |= UV_READABLE;
	if (events & SLUICE_LOOP_WRITABLE)
		ev |= UV_WRITABLE;
	return uv_poll_start(&io->x.u.poll, ev, on_poll);
}

static void uvl_io_close(sluice_loop_io_t *io, sluice_loop_fn *done, void *arg)
{
	/* Stopped now (libuv drops the fd from epoll at once): the client
	 * may close the socket as soon as this returns. */
	uv_poll_stop(&io->x.u.poll);
	handle_close(&io->x, done, arg);
}

/* ------------------------------------------------------------- resolving */

typedef struct resolve_s {
	uv_getaddrinfo_t req;
	sluice_loop_resolved_fn *fn;
	void *arg;
} resolve_t;

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	resolve_t *q = req->data;
	struct addrinfo *a;

	/* IPv4 first where a name has both: Redis binds 127.0.0.1 by
	 * default, and "localhost" often resolves to ::1 first. */
	for (a = res; a && a->ai_family != AF_INET; a = a->ai_next)
		;
	if (status < 0 || !res)
		q->fn(q->arg, status < 0 ? status : UV_EAI_NONAME, NULL,
		      uv_strerror(status));
	else
		q->fn(q->arg, 0, a ? a->ai_addr : res->ai_addr, NULL);
	uv_freeaddrinfo(res);
	free(q);
}

static int uvl_resolve(sluice_loop_t *loop, const char *host, int port,
		       sluice_loop_resolved_fn *fn, void *arg)
{
	resolve_t *q = malloc(sizeof(*q));
	struct addrinfo hints = {0};
	char portstr[16];
	int rc;

	if (!q)
		return UV_ENOMEM;
	q->fn = fn;
	q->arg = arg;
	q->req.data = q;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(portstr, sizeof(portstr), "%d", port);
	if ((rc = uv_getaddrinfo(loop ? uv_of(loop) : NULL, &q->req,
				 on_resolved, host, portstr, &hints)) < 0)
		free(q);
	return rc;
}

/* ------------------------------------------------------------------ loop */

static const sluice_loop_ops_t uv_ops = {
	.now = uvl_now,
	.timer_new = uvl_timer_new,
	.timer_start = uvl_timer_start,
	.timer_stop = uvl_timer_stop,
	.timer_active = uvl_timer_active,
	.timer_close = uvl_timer_close,
	.hook_new = uvl_hook_new,
	.hook_start = uvl_hook_start,
	.hook_stop = uvl_hook_stop,
	.hook_active = uvl_hook_active,
	.hook_first = uvl_hook_first,
	.hook_close = uvl_hook_close,
	.io_new = uvl_io_new,
	.io_watch = uvl_io_watch,
	.io_close = uvl_io_close,
	.resolve = uvl_resolve,
};

sluice_loop_t *sluice_loop_uv_new(uv_loop_t *uv)
{
	uvloop_t *l;

	if (!uv || !(l = calloc(1, sizeof(*l))))
		return NULL;
	l->base.ops = &uv_ops;
	l->uv = uv;
	return &l->base;
}

void sluice_loop_uv_free(sluice_loop_t *loop)
{
	free(loop);
}
