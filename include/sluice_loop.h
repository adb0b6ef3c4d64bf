/*
 * sluice_loop.h -- the event loop the Redis client runs on.
 *
 * The Redis client (sluice_redis.h) owns its sockets: it connects them
 * without blocking, reads, writes and runs TLS over them itself.  What it
 * needs of a loop is the little that every event loop has, in the table
 * below: tell it when a socket is readable or writable, run timers, run a
 * hook at the end of the loop's turn (so that the commands of one turn
 * leave in one write), and its clock.  A host on another loop gives the
 * client this table (sluice_redis_open_loop()), as hiredis's adapters do;
 * sluice_redis_open() builds it for a libuv loop (sluice_loop_uv_new()).
 *
 * Contract, for every adapter:
 *  - every callback runs on the loop's thread, from the loop, never from
 *    inside the operation that arms it (a `_start` or `_watch` never calls
 *    back before it returns);
 *  - nothing the client calls here allocates, except the `_new`s and
 *    `resolve` (which the client calls when it connects, not per call);
 *  - `_close(h, done, arg)` stops h and frees it; done (may be NULL) runs
 *    once, later, from the loop, never from inside `_close`: the client
 *    frees its memory from there, so a handle closed from inside its own
 *    callback stays valid until that callback returns;
 *  - a handle made with SLUICE_LOOP_WEAK does not by itself keep the loop
 *    running (libuv's uv_unref()); loops without that notion ignore it.
 */
#ifndef SLUICE_LOOP_H
#define SLUICE_LOOP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sockaddr;

typedef struct sluice_loop_s sluice_loop_t;
/* The adapter's handles: opaque to the client. */
typedef struct sluice_loop_timer_s sluice_loop_timer_t;
typedef struct sluice_loop_hook_s sluice_loop_hook_t;
typedef struct sluice_loop_io_s sluice_loop_io_t;

/* Readiness of a socket (sluice_loop_io_fn), and what io_watch asks. */
#define SLUICE_LOOP_READABLE 1
#define SLUICE_LOOP_WRITABLE 2

/* Flags of the `_new`s. */
#define SLUICE_LOOP_WEAK 1u /* does not keep the loop running */
/* A hook run right after the turn's I/O events have been handled, before
 * the rest of the turn (libuv: a check handle); without it, a hook runs
 * last in the turn, before the loop waits for I/O (libuv: a prepare
 * handle).  A loop whose turn has one end runs both there. */
#define SLUICE_LOOP_AFTER_IO 2u

typedef void sluice_loop_fn(void *arg);
/* events: SLUICE_LOOP_READABLE and/or _WRITABLE; both after an error on
 * the socket (the client's next read or write finds it). */
typedef void sluice_loop_io_fn(void *arg, int events);
/* A name resolved: status 0 and addr (valid during the call), or status
 * < 0 and why (the resolver's words). */
typedef void sluice_loop_resolved_fn(void *arg, int status,
				     const struct sockaddr *addr,
				     const char *why);

typedef struct sluice_loop_ops_s {
	/* The loop's clock in milliseconds, as cached for the current turn,
	 * on CLOCK_MONOTONIC's base (deadlines compare it with the real
	 * monotonic time). */
	uint64_t (*now)(sluice_loop_t *loop);

	/* A timer: fn(arg) runs once `ms` after timer_start, then every
	 * repeat_ms when that is not 0; starting an active timer moves it.
	 * NULL when out of memory. */
	sluice_loop_timer_t *(*timer_new)(sluice_loop_t *loop,
					  sluice_loop_fn *fn, void *arg,
					  unsigned flags);
	void (*timer_start)(sluice_loop_timer_t *t, uint64_t ms,
			    uint64_t repeat_ms);
	void (*timer_stop)(sluice_loop_timer_t *t);
	int (*timer_active)(const sluice_loop_timer_t *t);
	void (*timer_close)(sluice_loop_timer_t *t, sluice_loop_fn *done,
			    void *arg);

	/* An end-of-turn hook (SLUICE_LOOP_AFTER_IO above): once started,
	 * fn(arg) runs at the end of every turn until stopped (the client
	 * stops it from fn).  Never keeps the loop running.  hook_first
	 * (may be NULL) makes a started hook run before the hooks of its
	 * kind started since. */
	sluice_loop_hook_t *(*hook_new)(sluice_loop_t *loop, sluice_loop_fn *fn,
					void *arg, unsigned flags);
	void (*hook_start)(sluice_loop_hook_t *h);
	void (*hook_stop)(sluice_loop_hook_t *h);
	int (*hook_active)(const sluice_loop_hook_t *h);
	void (*hook_first)(sluice_loop_hook_t *h);
	void (*hook_close)(sluice_loop_hook_t *h, sluice_loop_fn *done,
			   void *arg);

	/* Readiness of the client's non-blocking socket fd, level-triggered:
	 * while watched for an event and ready for it, fn runs each turn.
	 * io_watch sets what is watched (0: nothing); 0 or a negative errno.
	 * io_close stops watching; the client closes fd itself, after. */
	sluice_loop_io_t *(*io_new)(sluice_loop_t *loop, int fd,
				    sluice_loop_io_fn *fn, void *arg,
				    unsigned flags);
	int (*io_watch)(sluice_loop_io_t *io, int events);
	void (*io_close)(sluice_loop_io_t *io, sluice_loop_fn *done, void *arg);

	/* Resolves host (IPv4 first where it has both) without blocking the
	 * loop: fn runs exactly once, later, from the loop; 0, or a negative
	 * errno (fn then does not run).  NULL: the client resolves with
	 * getaddrinfo(), which blocks while it asks (give addresses, or
	 * names the resolver answers at once, such as those in /etc/hosts). */
	int (*resolve)(sluice_loop_t *loop, const char *host, int port,
		       sluice_loop_resolved_fn *fn, void *arg);
} sluice_loop_ops_t;

/* A loop: an adapter puts this first in its own struct. */
struct sluice_loop_s {
	const sluice_loop_ops_t *ops;
};

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_LOOP_H */
