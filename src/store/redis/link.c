/*
 * link.c -- one connection to a Redis server (or a Sentinel), owned by the
 * client, on the loop the host gave it (sluice_loop.h).
 *
 * The link owns its socket, as hiredis's does: it connects it without
 * blocking (a unix socket, an address, or a name the loop resolves),
 * reads and writes it itself; the loop only says when it is ready.  TLS
 * runs over it (tls.c, memory BIOs); replies pair with commands in order
 * (link_fifo.h), parsed by hiredis's redisReader (reply.c).  Commands sent
 * before the link is up wait and go out once it is.
 *
 * Writes are batched: a command only appends to the output buffer, and the
 * buffer is written once per loop iteration, or when it holds
 * LINK_EARLY_CMDS commands queued over LINK_EARLY_NS or more: the commands
 * queued while handling one batch of events leave in one write (one TLS
 * record), or a few, never one each.  A write goes to the socket at once;
 * only what the socket does not take waits for it to be writable.
 * Commands queued while the loop handles I/O (a request read, then its
 * decision asked) leave from an after-I/O hook (libuv: a check handle),
 * right after the poll phase and before the other check callbacks -- such
 * as the Node addon's, which delivers the replies read in that same poll
 * phase and so runs the app's responses: Redis works on the new batch
 * while the app answers the last one.  Commands queued anywhere else (a
 * timer, a check callback) leave from an end-of-turn hook (libuv: a
 * prepare handle), just before the loop waits for I/O.
 *
 * Closing: sluice_redis__link_close() (or a failure) runs every pending
 * callback with a NULL reply at once and closes the socket; the memory
 * goes once the loop has released the handles.  A write refused is told
 * from the end-of-turn hook (the writer may be inside a call of ours).
 */
#include "store/redis/link_fifo.h"
#include "store/redis/redis_int.h"
#include "store/redis/tls.h"
#include "util/socket.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/read.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Output buffered beyond this, unwritten, refuses new commands. */
#define LINK_OUT_MAX (64u << 20)
#define LINK_READ_SZ 16384
/* Commands queued slowly in one go (a burst of requests read in one poll
 * phase, each costing the app tens of µs, as an Express app's do) leave
 * as soon as LINK_EARLY_CMDS of them wait and the first has waited
 * LINK_EARLY_NS, the rest at the end of the phase: Redis starts on the
 * first ones while the caller is still reading the others, instead of
 * idling until the whole burst is read -- and the caller then idling
 * while Redis runs the burst.  Commands queued quickly (a C server's, a
 * benchmark's, µs apart) still leave in one write per phase, or a few:
 * a write each few commands would cost more than it overlaps. */
#define LINK_EARLY_CMDS 8
#define LINK_EARLY_NS	100000

enum { L_RESOLVING, L_CONNECTING, L_HANDSHAKE, L_UP, L_CLOSED };

typedef struct link_s {
	sluice_redis_link_t pub; /* first: the owner's view */
	sluice_redis_t *r;
	const sluice_loop_ops_t *ops; /* r's loop's */
	sluice_redis_link_fn *on_state;
	int state;
	unsigned open; /* handles and requests still to finish */
	int fd;	       /* the socket, -1: none */
	sluice_loop_io_t *io;
	int watching;	  /* SLUICE_LOOP_READABLE/_WRITABLE asked of io */
	int failing;	  /* failed where the owner cannot hear: told from
			     the end-of-turn hook */
	int write_failed; /* that failure was a write's */
	sluice_loop_hook_t *flush; /* end of the turn */
	sluice_loop_hook_t *early; /* the flush after the I/O events */
	int port;
	char *name; /* the TLS name: server_name or the host */

	redisReader *reader;
	sluice_redis_tls_session_t *tls;

	char *out; /* plaintext queued, not yet written */
	size_t outlen, outcap;
	/* Bytes handed to the socket that it has not taken yet (plaintext,
	 * or TLS records): wbuf[woff..wlen). */
	char *wbuf;
	size_t woff, wlen, wcap;
	unsigned unsent;   /* commands in out */
	uint64_t first_ns; /* sluice_redis__hrtime() when the first came */

	link_fifo_t q; /* callbacks, one per command, in order */
	sluice_redis_reply_fn *push_fn;
	void *push_priv;

	char rbuf[LINK_READ_SZ];
} link_t;

static void link_fail(link_t *l, const char *why);

/* -------------------------------------------------------------- memory */

static void link_release(link_t *l)
{
	sluice_redis_t *r = l->r;

	if (--l->open)
		return;
	sluice_redis__reader_free(l->reader);
	sluice_redis__tls_free(l->tls);
	free(l->out);
	free(l->wbuf);
	free(l->q.v);
	free(l->name);
	free(l);
	r->released(r);
}

static void on_handle_closed(void *arg)
{
	link_release(arg);
}

/* "what: text" for an errno, in the words of libuv's messages (the
 * system's, lower case). */
static void say(char *why, size_t n, const char *what, int err)
{
	int at = snprintf(why, n, "%s: ", what);

	snprintf(why + at, n - (size_t)at, "%s", strerror(err));
	if (why[at] >= 'A' && why[at] <= 'Z' && why[at + 1] >= 'a' &&
	    why[at + 1] <= 'z')
		why[at] = (char)(why[at] - 'A' + 'a');
}

/* What the loop watches on the socket. */
static void watch(link_t *l, int events)
{
	int rc;

	if (events == l->watching || !l->io)
		return;
	l->watching = events;
	if ((rc = l->ops->io_watch(l->io, events)) < 0) {
		say(l->pub.errstr, sizeof(l->pub.errstr), "poll", -rc);
		l->failing = 1;
		l->ops->hook_start(l->flush);
	}
}

/* Every command still waiting gets NULL, oldest first. */
static void fail_pending(link_t *l)
{
	pending_t p;

	while (fifo_pop(&l->q, &p) == 0)
		if (p.fn)
			p.fn(&l->pub, NULL, p.priv);
}

/* --------------------------------------------------------------- writing */

/* A write that failed: told from the end-of-turn hook, as libuv tells a
 * failed write from the loop: the callers of the write (link_send(), a
 * batch being sent) do not expect the callbacks to run before it returns. */
static void write_error(link_t *l, const char *why)
{
	if (why)
		snprintf(l->pub.errstr, sizeof(l->pub.errstr), "%s", why);
	l->failing = 1;
	l->write_failed = 1;
	l->ops->hook_start(l->flush);
}

/* Writes wbuf[woff..wlen) as far as the socket takes it; the rest waits
 * for the socket to be writable.  -1 once the socket refused it. */
static int write_pending(link_t *l)
{
	while (l->woff < l->wlen) {
		ssize_t n = send(l->fd, l->wbuf + l->woff, l->wlen - l->woff,
				 MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			watch(l, SLUICE_LOOP_READABLE | SLUICE_LOOP_WRITABLE);
			return 0;
		}
		if (n < 0) {
			char why[128];

			say(why, sizeof(why), "write", errno);
			write_error(l, why);
			return -1;
		}
		l->woff += (size_t)n;
	}
	l->woff = l->wlen = 0;
	watch(l, SLUICE_LOOP_READABLE);
	return 0;
}

/* Hands buf[0..len) to the socket: written now as far as it goes, the
 * rest kept (copied) until the socket is writable.  -1 when out of
 * memory (a write error is told later, write_error()). */
static int write_raw(link_t *l, const char *buf, size_t len)
{
	if (l->wlen == l->woff) {
		ssize_t n;

		do
			n = send(l->fd, buf, len, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			char why[128];

			say(why, sizeof(why), "write", errno);
			write_error(l, why);
			return 0;
		}
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		}
		l->woff = l->wlen = 0;
		if (!len)
			return 0;
	}
	if (l->wlen + len > l->wcap) {
		size_t cap = l->wcap ? l->wcap : 4096;
		char *grown;

		if (l->woff) {
			memmove(l->wbuf, l->wbuf + l->woff, l->wlen - l->woff);
			l->wlen -= l->woff;
			l->woff = 0;
		}
		while (cap < l->wlen + len)
			cap *= 2;
		if (cap > l->wcap) {
			if (!(grown = realloc(l->wbuf, cap)))
				return -1;
			l->wbuf = grown;
			l->wcap = cap;
		}
	}
	memcpy(l->wbuf + l->wlen, buf, len);
	l->wlen += len;
	watch(l, SLUICE_LOOP_READABLE | SLUICE_LOOP_WRITABLE);
	return 0;
}

/* Sends what TLS has produced (handshake records, alerts, data). */
static int write_tls_out(link_t *l)
{
	char *buf;
	size_t n = sluice_redis__tls_take_out(l->tls, &buf);
	int rc;

	if (!n)
		return 0;
	rc = write_raw(l, buf, n);
	free(buf);
	return rc;
}

/* Writes the queued commands: in one write as they are, or through TLS.
 * A failure is told from the end-of-turn hook (write_error()). */
static void flush(link_t *l)
{
	size_t len = l->outlen;

	l->ops->hook_stop(l->flush);
	l->ops->hook_stop(l->early);
	if (l->state != L_UP || !len || l->failing)
		return;
	l->unsent = 0;
	l->outlen = 0;
	if (l->tls) {
		if (sluice_redis__tls_write(l->tls, l->out, len, l->pub.errstr,
					    sizeof(l->pub.errstr)) < 0) {
			l->pub.tls_failed = 1;
			write_error(l, NULL);
			return;
		}
		if (write_tls_out(l) < 0)
			write_error(l, "write: out of memory");
		return;
	}
	/* The buffer stays; what the socket does not take is copied. */
	if (write_raw(l, l->out, len) < 0)
		write_error(l, "write: could not queue");
}

void sluice_redis__link_flush(sluice_redis_link_t *pub)
{
	link_t *l = (link_t *)pub;

	if (!l->failing)
		flush(l);
}

static size_t on_readable(link_t *l);
static void connected(link_t *l, int err);

static void on_flush(void *arg)
{
	link_t *l = arg;

	if (!l->failing) {
		flush(l);
		return;
	}
	/* A write refused: what the server said before it went (a TLS
	 * alert, the replies it sent) is read first, as libuv's loop
	 * polls before it tells a failed write; its reason wins. */
	if (l->write_failed && l->fd >= 0 && l->state != L_CLOSED)
		on_readable(l);
	link_fail(l, NULL);
}

static void on_early(void *arg)
{
	link_t *l = arg;

	if (!l->failing)
		flush(l);
}

/* The flush comes before any after-I/O hook started since (the replies
 * just read may have started the owner's). */
static void flush_first(link_t *l)
{
	if (l->ops->hook_first)
		l->ops->hook_first(l->early);
}

/* A failure found while opening: the owner has no pointer to the link
 * yet, so it hears of it from the loop, like any other. */
static void fail_soon(link_t *l, const char *why)
{
	snprintf(l->pub.errstr, sizeof(l->pub.errstr), "%s", why);
	l->failing = 1;
	l->ops->hook_start(l->flush);
}

int sluice_redis__link_send(sluice_redis_link_t *pub, sluice_redis_reply_fn *fn,
			    void *priv, const char *resp, size_t len)
{
	link_t *l = (link_t *)pub;

	if (l->state == L_CLOSED || l->outlen + len > LINK_OUT_MAX)
		return -1;
	if (l->outlen + len > l->outcap) {
		size_t cap = l->outcap ? l->outcap : 4096;
		char *grown;

		while (cap < l->outlen + len)
			cap *= 2;
		if (!(grown = realloc(l->out, cap)))
			return -1;
		l->out = grown;
		l->outcap = cap;
	}
	if (fifo_push(&l->q, fn, priv) < 0)
		return -1;
	memcpy(l->out + l->outlen, resp, len);
	l->outlen += len;
	if (l->state != L_UP || l->failing)
		return 0;
	if (l->unsent++ == 0)
		l->first_ns = sluice_redis__hrtime();
	else if (l->unsent >= LINK_EARLY_CMDS &&
		 sluice_redis__hrtime() - l->first_ns >= LINK_EARLY_NS) {
		flush(l);
		return 0;
	}
	if (!l->ops->hook_active(l->flush)) {
		l->ops->hook_start(l->flush);
		l->ops->hook_start(l->early);
	}
	return 0;
}

void sluice_redis__link_on_push(sluice_redis_link_t *pub,
				sluice_redis_reply_fn *fn, void *priv)
{
	link_t *l = (link_t *)pub;

	l->push_fn = fn;
	l->push_priv = priv;
}

/* --------------------------------------------------------------- reading */

/* Parses and dispatches every complete reply fed so far; -1 when the link
 * failed or was closed on the way. */
static int dispatch(link_t *l)
{
	redisReply *reply;
	pending_t p;

	while (l->state != L_CLOSED) {
		char why[200];

		if (sluice_redis__reader_get(l->reader, &reply, why,
					     sizeof(why)) < 0) {
			link_fail(l, why);
			return -1;
		}
		if (!reply)
			return 0;
		l->pub.progress_ns = sluice_redis__hrtime();
		if (l->push_fn) {
			l->push_fn(&l->pub, reply, l->push_priv);
		} else if (fifo_pop(&l->q, &p) < 0) {
			freeReplyObject(reply);
			link_fail(l, "protocol error: a reply to no command");
			return -1;
		} else if (p.fn) {
			p.fn(&l->pub, reply, p.priv);
		}
		freeReplyObject(reply);
	}
	return -1;
}

static void link_up(link_t *l)
{
	l->pub.progress_ns = sluice_redis__hrtime();
	l->state = L_UP;
	l->on_state(&l->pub, 0);
	if (l->state == L_UP && l->outlen)
		flush(l);
}

static void tls_advance(link_t *l)
{
	int rc = sluice_redis__tls_handshake(l->tls, l->pub.errstr,
					     sizeof(l->pub.errstr));

	/* Whatever the handshake produced goes out, an alert included. */
	if (write_tls_out(l) < 0) {
		link_fail(l, "write: out of memory");
		return;
	}
	if (rc < 0) {
		l->pub.tls_failed = 1;
		link_fail(l, NULL);
	} else if (rc == 1) {
		link_up(l);
	}
}

/* Ciphertext in -> plaintext to the reader. */
static int tls_input(link_t *l, const char *data, size_t len)
{
	char plain[LINK_READ_SZ];
	long n;

	if (sluice_redis__tls_feed(l->tls, data, len) < 0) {
		link_fail(l, "TLS: out of memory");
		return -1;
	}
	if (l->state == L_HANDSHAKE) {
		tls_advance(l);
		if (l->state != L_UP)
			return -1;
	}
	while ((n = sluice_redis__tls_read(l->tls, plain, sizeof(plain),
					   l->pub.errstr,
					   sizeof(l->pub.errstr))) > 0) {
		if (redisReaderFeed(l->reader, plain, (size_t)n) != REDIS_OK) {
			link_fail(l, "out of memory");
			return -1;
		}
		if (dispatch(l) < 0)
			return -1;
	}
	if (n < 0) {
		l->pub.tls_failed = 1;
		link_fail(l, NULL);
		return -1;
	}
	/* TLS 1.3 may answer with records of its own (key updates). */
	if (write_tls_out(l) < 0) {
		link_fail(l, "write: out of memory");
		return -1;
	}
	return 0;
}

/* The socket is readable: what it holds goes to the reader (through TLS),
 * in reads of rbuf's size, as long as they come back full (at most 32: a
 * server that floods does not hold the loop).  The bytes read (or 1 for
 * an end or an error that closed the link): 0 when the socket held none. */
static size_t on_readable(link_t *l)
{
	unsigned reads = 0;
	size_t total = 0;
	ssize_t n;

	do {
		n = recv(l->fd, l->rbuf, sizeof(l->rbuf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return total;
		if (n <= 0) {
			char why[128];

			if (n == 0)
				snprintf(why, sizeof(why),
					 "connection closed by the server");
			else
				say(why, sizeof(why), "read", errno);
			link_fail(l, why);
			return total + 1;
		}
		total += (size_t)n;
		if (l->tls) {
			if (tls_input(l, l->rbuf, (size_t)n) < 0)
				return total;
		} else if (redisReaderFeed(l->reader, l->rbuf, (size_t)n) !=
			   REDIS_OK) {
			link_fail(l, "out of memory");
			return total;
		} else if (dispatch(l) < 0) {
			return total;
		}
		flush_first(l);
	} while (n == (ssize_t)sizeof(l->rbuf) && ++reads < 32 &&
		 l->state != L_CLOSED);
	return total;
}

/* What the socket holds now, taken without waiting for the loop to say
 * so.  A timer's deadline is judged against the real clock, and a loop
 * held past it (a long callback, a host with more work than cores) runs
 * the timers of its next turn before it polls the sockets: the answer
 * may already sit in the socket, or the connect be done, when the timer
 * fires.  Judging the server late then would be judging the host. */
int sluice_redis__link_poll(sluice_redis_link_t *pub)
{
	link_t *l = (link_t *)pub;
	int progress = 0;

	if (!l || l->fd < 0)
		return 0;
	if (l->state == L_CONNECTING) {
		struct pollfd p = {.fd = l->fd, .events = POLLOUT};
		int err = 0;
		socklen_t len = sizeof(err);

		if (poll(&p, 1, 0) != 1)
			return 0;
		if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		connected(l, err);
		progress = 1;
	}
	if (l->state == L_HANDSHAKE || l->state == L_UP)
		progress |= on_readable(l) > 0;
	return progress;
}

/* ------------------------------------------------------------ connecting */

static void connected(link_t *l, int err)
{
	char why[160];

	if (err) {
		/* A reset here came from a server that accepted us and then
		 * dropped us before the connect was seen through. */
		if (err == ECONNRESET)
			l->pub.reset = 1;
		say(why, sizeof(why), "connect", err);
		link_fail(l, why);
		return;
	}
	l->pub.reached = 1;
	l->pub.progress_ns = sluice_redis__hrtime();
	watch(l, SLUICE_LOOP_READABLE);
	if (!l->tls) {
		link_up(l);
		return;
	}
	l->state = L_HANDSHAKE;
	tls_advance(l);
}

static void on_io(void *arg, int events)
{
	link_t *l = arg;

	if (l->state == L_CLOSED)
		return;
	if (l->state == L_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);

		if (!(events & SLUICE_LOOP_WRITABLE))
			return;
		if (getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		connected(l, err);
		return;
	}
	if ((events & SLUICE_LOOP_WRITABLE) && l->wlen > l->woff &&
	    !l->failing && write_pending(l) < 0)
		return;
	if ((events & SLUICE_LOOP_READABLE) && l->state != L_CLOSED)
		on_readable(l);
}

/* Starts a non-blocking connect to sa; the loop says when it is done
 * (writable).  Errors found now are told from the loop (fail_soon()). */
static void connect_to(link_t *l, const struct sockaddr *sa, socklen_t salen)
{
	char why[160];
	int one = 1, rc;

	l->state = L_CONNECTING;
	l->fd = sluice_stream_socket(sa->sa_family);
	if (l->fd < 0) {
		say(why, sizeof(why), "socket", errno);
		fail_soon(l, why);
		return;
	}
	if (sa->sa_family != AF_UNIX)
		(void)setsockopt(l->fd, IPPROTO_TCP, TCP_NODELAY, &one,
				 sizeof(one));
	l->io = l->ops->io_new(
		l->r->loop, l->fd, on_io, l,
		l->r->flags & SLUICE_REDIS_UNREF ? SLUICE_LOOP_WEAK : 0);
	if (!l->io) {
		fail_soon(l, "socket: out of memory");
		return;
	}
	l->open++;
	do
		rc = connect(l->fd, sa, salen);
	while (rc < 0 && errno == EINTR);
	if (rc < 0 && errno != EINPROGRESS) {
		if (errno == ECONNRESET)
			l->pub.reset = 1;
		say(why, sizeof(why), "connect", errno);
		fail_soon(l, why);
		return;
	}
	watch(l, SLUICE_LOOP_WRITABLE);
}

static void on_resolved(void *arg, int status, const struct sockaddr *sa,
			const char *what)
{
	link_t *l = arg;
	char why[160];

	if (l->state != L_CLOSED) {
		if (status < 0 || !sa) {
			snprintf(why, sizeof(why), "resolve: %s",
				 what ? what : "no address");
			link_fail(l, why);
		} else {
			connect_to(l, sa,
				   sa->sa_family == AF_INET6
					   ? sizeof(struct sockaddr_in6)
					   : sizeof(struct sockaddr_in));
		}
	}
	link_release(l); /* the resolver's, which kept l alive until here */
}

sluice_redis_link_t *sluice_redis__link_open(sluice_redis_t *r,
					     const char *host, int port,
					     const char *path, int tls,
					     sluice_redis_link_fn *on_state)
{
	const sluice_loop_ops_t *ops = r->loop->ops;
	link_t *l = calloc(1, sizeof(*l));
	struct sockaddr_storage sa;
	socklen_t salen;
	char why[160];
	int rc;

	if (!l)
		return NULL;
	l->r = r;
	l->ops = ops;
	l->fd = -1;
	l->on_state = on_state;
	l->port = port;
	l->reader = sluice_redis__reader_new();
	if (tls && r->tls) {
		const char *name = r->tls_name ? r->tls_name : host;

		l->name = strdup(name ? name : "");
		l->tls = l->name ? sluice_redis__tls_new(r->tls, l->name,
							 l->pub.errstr,
							 sizeof(l->pub.errstr))
				 : NULL;
	}
	l->flush = ops->hook_new(r->loop, on_flush, l, 0);
	l->early = ops->hook_new(r->loop, on_early, l, SLUICE_LOOP_AFTER_IO);
	if (!l->reader || (tls && (!r->tls || !l->tls)) || !l->flush ||
	    !l->early) {
		/* Hooks never started: closed with no one to tell. */
		if (l->flush)
			ops->hook_close(l->flush, NULL, NULL);
		if (l->early)
			ops->hook_close(l->early, NULL, NULL);
		sluice_redis__reader_free(l->reader);
		sluice_redis__tls_free(l->tls);
		free(l->name);
		free(l);
		return NULL;
	}
	/* Counted in the client's open handles until its memory goes. */
	r->open_handles++;
	l->open = 2; /* the two hooks */

	rc = sluice_redis__sockaddr(host, port, path, &sa, &salen);
	if (rc == 0) {
		/* A name: the loop's resolver, else getaddrinfo() here. */
		l->state = L_RESOLVING;
		if (!ops->resolve) {
			if (sluice_redis__resolve_now(host, port, &sa, &salen,
						      why, sizeof(why)) < 0)
				fail_soon(l, why);
			else
				connect_to(l, (struct sockaddr *)&sa, salen);
			return &l->pub;
		}
	} else {
		if (rc < 0) {
			l->state = L_CONNECTING;
			say(why, sizeof(why), "connect", ENAMETOOLONG);
			fail_soon(l, why);
		} else {
			connect_to(l, (struct sockaddr *)&sa, salen);
		}
		return &l->pub;
	}
	if ((rc = ops->resolve(r->loop, host, port, on_resolved, l)) < 0) {
		say(why, sizeof(why), "resolve", -rc);
		fail_soon(l, why);
		return &l->pub;
	}
	l->open++;
	return &l->pub;
}

/* --------------------------------------------------------------- closing */

/* Stops I/O, closes the socket and runs the pending callbacks; the
 * memory goes once the loop has released the handles. */
static void link_teardown(link_t *l)
{
	l->state = L_CLOSED;
	l->ops->hook_close(l->flush, on_handle_closed, l);
	l->ops->hook_close(l->early, on_handle_closed, l);
	if (l->io) {
		l->ops->io_close(l->io, on_handle_closed, l);
		l->io = NULL;
	}
	if (l->fd >= 0) {
		close(l->fd);
		l->fd = -1;
	}
	fail_pending(l);
}

/* A failure: the owner hears of it after the pending callbacks.  The
 * message is why (NULL: already in errstr). */
static void link_fail(link_t *l, const char *why)
{
	if (l->state == L_CLOSED)
		return;
	if (why)
		snprintf(l->pub.errstr, sizeof(l->pub.errstr), "%s", why);
	link_teardown(l);
	l->on_state(&l->pub, -1);
}

void sluice_redis__link_close(sluice_redis_link_t *pub)
{
	link_t *l = (link_t *)pub;

	if (!l || l->state == L_CLOSED)
		return;
	link_teardown(l);
}
