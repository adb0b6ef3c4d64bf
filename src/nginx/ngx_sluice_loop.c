/*
 * ngx_sluice_loop.c -- the Redis client's loop (sluice_loop.h) on nginx's
 * own event loop, so that a worker decides on Redis without a thread and
 * without ever blocking: what adapters/libuv.c is to `sluice serve`.
 *
 * Each handle of the interface is made of nginx's own parts:
 *  - a socket's readiness is an ngx_connection_t taken for the client's
 *    fd (ngx_get_connection()), its read and write events added with
 *    NGX_LEVEL_EVENT: level-triggered, as the interface asks, even where
 *    nginx's own connections are edge-triggered (epoll's EPOLLET).  The
 *    client owns the fd: closing the handle gives the connection back
 *    (ngx_free_connection()) and never closes the fd;
 *  - a timer is an ngx_event_t in nginx's timer tree.  A timer made
 *    SLUICE_LOOP_WEAK is `cancelable`: a worker shutting down gracefully
 *    does not wait for it.  The client opens with SLUICE_REDIS_UNREF, so
 *    its reconnection and probe timers are weak, and only the deadline of
 *    calls still waiting for Redis holds a worker (at most timeout= ms);
 *  - an end-of-turn hook is an ngx_event_t posted to ngx_posted_events,
 *    which nginx runs after the turn's I/O and timer handlers: every
 *    request decided in one turn has queued its command by then, so the
 *    turn's commands leave in one write.  A hook still started after it
 *    ran goes to ngx_posted_next_events (the next turn);
 *  - the `done` of a close is a posted event too (never called from
 *    inside the close, as the interface says).
 *
 * The clock is ngx_current_msec (cached per turn, as uv_now()) moved onto
 * CLOCK_MONOTONIC's base.  There is no resolver: the client resolves
 * with getaddrinfo(), which blocks while it asks, when it connects
 * (docs/NGINX.md: give Redis by address, or a name /etc/hosts answers).
 */
#include "ngx_http_sluice.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

typedef struct nloop_s {
	sluice_loop_t base; /* first: the client's view */
	ngx_log_t *log;
	int64_t offset_ms;   /* CLOCK_MONOTONIC minus ngx_current_msec */
	ngx_queue_t closing; /* handles whose close notice is posted */
} nloop_t;

/* One handle of any kind; the interface's opaque types are this. */
typedef struct nh_s {
	ngx_event_t ev; /* the timer, the hook, then the close notice */
	nloop_t *loop;
	sluice_loop_fn *fn;
	sluice_loop_io_fn *io_fn;
	void *arg;
	uint64_t repeat_ms;
	ngx_connection_t *c;  /* a socket's */
	sluice_loop_fn *done; /* after close */
	void *done_arg;
	ngx_queue_t cq;	      /* on loop->closing */
	unsigned started : 1; /* a hook between start and stop */
	unsigned closed : 1;
} nh_t;

struct sluice_loop_timer_s {
	nh_t x;
};
struct sluice_loop_hook_s {
	nh_t x;
};
struct sluice_loop_io_s {
	nh_t x;
};

static nh_t *handle_new(sluice_loop_t *loop, ngx_event_handler_pt handler,
			sluice_loop_fn *fn, void *arg)
{
	nh_t *x = calloc(1, sizeof(*x));

	if (x == NULL)
		return NULL;
	x->loop = (nloop_t *)loop;
	x->fn = fn;
	x->arg = arg;
	x->ev.data = x;
	x->ev.log = x->loop->log;
	x->ev.handler = handler;
	return x;
}

/* The close notice: the handle's memory goes, then its owner hears (the
 * owner may free the whole client from done). */
static void on_closed(ngx_event_t *ev)
{
	nh_t *x = ev->data;
	sluice_loop_fn *done = x->done;
	void *arg = x->done_arg;

	ngx_queue_remove(&x->cq);
	free(x);
	if (done)
		done(arg);
}

static void handle_close(nh_t *x, sluice_loop_fn *done, void *arg)
{
	if (x->ev.timer_set)
		ngx_del_timer(&x->ev);
	if (x->ev.posted) {
		ngx_delete_posted_event(&x->ev);
	}
	x->closed = 1;
	x->started = 0;
	x->done = done;
	x->done_arg = arg;
	x->ev.handler = on_closed;
	x->ev.cancelable = 1;
	ngx_queue_insert_tail(&x->loop->closing, &x->cq);
	ngx_post_event(&x->ev, &ngx_posted_events);
}

/* ---------------------------------------------------------------- clock */

static int64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Never ahead of the monotonic clock: the client arms a timer for
 * deadline - now and checks the deadline with the real clock when it
 * fires, so a clock ahead would fire early and re-arm for 0, again and
 * again, while nginx's cached time stands still. */
static uint64_t nl_now(sluice_loop_t *loop)
{
	int64_t cached =
		(int64_t)ngx_current_msec + ((nloop_t *)loop)->offset_ms;
	int64_t real = monotonic_ms();

	return (uint64_t)(cached < real ? cached : real);
}

/* --------------------------------------------------------------- timers */

static void on_timer(ngx_event_t *ev)
{
	nh_t *x = ev->data;

	if (x->repeat_ms)
		ngx_add_timer(ev, (ngx_msec_t)(x->repeat_ms > 86400000
						       ? 86400000
						       : x->repeat_ms));
	x->fn(x->arg);
}

static sluice_loop_timer_t *
nl_timer_new(sluice_loop_t *loop, sluice_loop_fn *fn, void *arg, unsigned flags)
{
	nh_t *x = handle_new(loop, on_timer, fn, arg);

	if (x == NULL)
		return NULL;
	x->ev.cancelable = (flags & SLUICE_LOOP_WEAK) != 0;
	return (sluice_loop_timer_t *)x;
}

static void nl_timer_start(sluice_loop_timer_t *t, uint64_t ms,
			   uint64_t repeat_ms)
{
	/* ngx_add_timer() leaves a timer alone when the new expiry is
	 * within NGX_TIMER_LAZY_DELAY of the old one: moving it means
	 * taking it out first.  At least 1 ms: a timer of 0 started from a
	 * timer's callback would expire in the same pass over the timers
	 * (nginx's clock does not move during it), where libuv runs it in
	 * the next turn. */
	if (t->x.ev.timer_set)
		ngx_del_timer(&t->x.ev);
	t->x.repeat_ms = repeat_ms;
	ngx_add_timer(&t->x.ev, (ngx_msec_t)(ms > 86400000 ? 86400000
					     : ms	   ? ms
							   : 1));
}

static void nl_timer_stop(sluice_loop_timer_t *t)
{
	if (t->x.ev.timer_set)
		ngx_del_timer(&t->x.ev);
}

static int nl_timer_active(const sluice_loop_timer_t *t)
{
	return t->x.ev.timer_set;
}

static void nl_timer_close(sluice_loop_timer_t *t, sluice_loop_fn *done,
			   void *arg)
{
	handle_close(&t->x, done, arg);
}

/* ---------------------------------------------------------------- hooks */

static void on_hook(ngx_event_t *ev)
{
	nh_t *x = ev->data;

	if (!x->started)
		return;
	x->fn(x->arg);
	/* Still started (and not closed from fn): again at the end of the
	 * next turn, not in this pass over the posted events. */
	if (x->started && !x->closed && !ev->posted) {
		ngx_post_event(ev, &ngx_posted_next_events);
	}
}

static sluice_loop_hook_t *nl_hook_new(sluice_loop_t *loop, sluice_loop_fn *fn,
				       void *arg, unsigned flags)
{
	nh_t *x = handle_new(loop, on_hook, fn, arg);

	/* nginx's turn has one end (its posted events): hooks with and
	 * without SLUICE_LOOP_AFTER_IO both run there. */
	(void)flags;
	return (sluice_loop_hook_t *)x;
}

static void nl_hook_start(sluice_loop_hook_t *h)
{
	h->x.started = 1;
	ngx_post_event(&h->x.ev, &ngx_posted_events);
}

static void nl_hook_stop(sluice_loop_hook_t *h)
{
	h->x.started = 0;
	if (h->x.ev.posted) {
		ngx_delete_posted_event(&h->x.ev);
	}
}

static int nl_hook_active(const sluice_loop_hook_t *h)
{
	return h->x.started;
}

/* Before every hook waiting in this turn's posted events. */
static void nl_hook_first(sluice_loop_hook_t *h)
{
	if (!h->x.started || !h->x.ev.posted)
		return;
	ngx_queue_remove(&h->x.ev.queue);
	ngx_queue_insert_head(&ngx_posted_events, &h->x.ev.queue);
}

static void nl_hook_close(sluice_loop_hook_t *h, sluice_loop_fn *done,
			  void *arg)
{
	handle_close(&h->x, done, arg);
}

/* -------------------------------------------------------------- sockets */

static void on_io(ngx_event_t *ev, int what)
{
	ngx_connection_t *c = ev->data;
	nh_t *x = c->data;

	/* A readiness nginx had gathered before the watch changed. */
	if (!ev->active || x->closed)
		return;
	x->io_fn(x->arg, what);
}

static void on_readable(ngx_event_t *ev)
{
	on_io(ev, SLUICE_LOOP_READABLE);
}

static void on_writable(ngx_event_t *ev)
{
	on_io(ev, SLUICE_LOOP_WRITABLE);
}

static sluice_loop_io_t *nl_io_new(sluice_loop_t *loop, int fd,
				   sluice_loop_io_fn *fn, void *arg,
				   unsigned flags)
{
	nh_t *x = handle_new(loop, NULL, NULL, arg);
	ngx_connection_t *c;

	(void)flags; /* a socket never holds a worker that is exiting */
	if (x == NULL)
		return NULL;
	x->io_fn = fn;
	/* One of worker_connections: NULL (logged by nginx) when none is
	 * free, which the client takes as a failed connect. */
	c = ngx_get_connection(fd, x->loop->log);
	if (c == NULL) {
		free(x);
		return NULL;
	}
	c->data = x;
	c->log = x->loop->log;
	c->read->log = x->loop->log;
	c->write->log = x->loop->log;
	c->read->handler = on_readable;
	c->write->handler = on_writable;
	x->c = c;
	return (sluice_loop_io_t *)x;
}

/* Adds or deletes one event so that it is watched as `on` says. */
static int watch_one(ngx_event_t *ev, ngx_int_t event, int on)
{
	if (on && !ev->active) {
		if (ngx_add_event(ev, event, NGX_LEVEL_EVENT) != NGX_OK)
			return -EIO;
	} else if (!on && ev->active) {
		if (ngx_del_event(ev, event, 0) != NGX_OK)
			return -EIO;
	}
	if (!on && ev->posted) {
		ngx_delete_posted_event(ev);
	}
	return 0;
}

static int nl_io_watch(sluice_loop_io_t *io, int events)
{
	ngx_connection_t *c = io->x.c;
	int rc;

	rc = watch_one(c->read, NGX_READ_EVENT,
		       (events & SLUICE_LOOP_READABLE) != 0);
	if (rc == 0)
		rc = watch_one(c->write, NGX_WRITE_EVENT,
			       (events & SLUICE_LOOP_WRITABLE) != 0);
	return rc;
}

static void nl_io_close(sluice_loop_io_t *io, sluice_loop_fn *done, void *arg)
{
	ngx_connection_t *c = io->x.c;

	/* Out of the event set now: the client closes the fd once this
	 * returns.  The connection goes back to nginx's free list without
	 * closing its fd (which is the client's). */
	(void)watch_one(c->read, NGX_READ_EVENT, 0);
	(void)watch_one(c->write, NGX_WRITE_EVENT, 0);
	ngx_free_connection(c);
	c->fd = (ngx_socket_t)-1;
	io->x.c = NULL;
	handle_close(&io->x, done, arg);
}

/* ------------------------------------------------------------------ loop */

static const sluice_loop_ops_t ngx_ops = {
	.now = nl_now,
	.timer_new = nl_timer_new,
	.timer_start = nl_timer_start,
	.timer_stop = nl_timer_stop,
	.timer_active = nl_timer_active,
	.timer_close = nl_timer_close,
	.hook_new = nl_hook_new,
	.hook_start = nl_hook_start,
	.hook_stop = nl_hook_stop,
	.hook_active = nl_hook_active,
	.hook_first = nl_hook_first,
	.hook_close = nl_hook_close,
	.io_new = nl_io_new,
	.io_watch = nl_io_watch,
	.io_close = nl_io_close,
	.resolve = NULL,
};

sluice_loop_t *ngx_sluice_loop_new(ngx_log_t *log)
{
	nloop_t *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	l->base.ops = &ngx_ops;
	l->log = log;
	/* ngx_current_msec may or may not be on the monotonic base (it is
	 * in recent nginx); the offset makes it so, from a fresh reading. */
	ngx_time_update();
	l->offset_ms = monotonic_ms() - (int64_t)ngx_current_msec;
	ngx_queue_init(&l->closing);
	return &l->base;
}

void ngx_sluice_loop_free(sluice_loop_t *loop)
{
	nloop_t *l = (nloop_t *)loop;
	nh_t *x;

	/* A worker exiting runs no more turns: the close notices still
	 * posted are delivered here (a done may close more handles). */
	while (!ngx_queue_empty(&l->closing)) {
		x = ngx_queue_data(ngx_queue_head(&l->closing), nh_t, cq);
		if (x->ev.posted) {
			ngx_delete_posted_event(&x->ev);
		}
		on_closed(&x->ev);
	}
	free(l);
}
