/*
 * link.c -- one connection to a Redis server (or a Sentinel), owned by the
 * client on its libuv loop.
 *
 * The link connects (a unix socket, an address, or a name resolved with
 * uv_getaddrinfo), optionally runs TLS over it (tls.c, memory BIOs), and
 * carries commands in RESP.  Replies come back in the order the commands
 * were sent, so a FIFO of callbacks pairs each reply with its command;
 * hiredis's redisReader parses RESP, bounded and redacted by reply.c.  Commands
 * sent before the link is up wait in the output buffer and go out once it is
 * (after the TLS handshake).
 *
 * Writes are batched: a command only appends to the output buffer, and the
 * buffer is written once per loop iteration, or when it holds
 * LINK_EARLY_CMDS commands queued over LINK_EARLY_NS or more: the commands
 * queued while handling one batch of events leave in one write (one TLS
 * record), or a few, never one each.
 * Commands queued while the loop handles I/O (a request read, then its
 * decision asked) leave from a check handle, right after the poll phase
 * and before the other check callbacks -- such as the Node addon's, which
 * delivers the replies read in that same poll phase and so runs the app's
 * responses: Redis works on the new batch while the app answers the last
 * one.  Commands queued anywhere else (a timer, a check callback) leave
 * from a prepare handle, just before the loop waits for I/O.
 *
 * Closing: sluice_redis__link_close() (or a failure) runs every pending
 * callback with a NULL reply at once; the memory goes when the loop has
 * closed the handles, so a link closed from inside its own callbacks stays
 * valid until they return.
 */
#include "store/redis/redis_int.h"
#include "store/redis/tls.h"

#include <assert.h>
#include <hiredis/read.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct pending_s {
	sluice_redis_reply_fn *fn;
	void *priv;
} pending_t;

enum { L_RESOLVING, L_CONNECTING, L_HANDSHAKE, L_UP, L_CLOSED };

typedef struct link_s {
	sluice_redis_link_t pub; /* first: the owner's view */
	sluice_redis_t *r;
	sluice_redis_link_fn *on_state;
	int state;
	int is_pipe;
	unsigned open; /* handles and requests still to finish */
	union {
		uv_handle_t h;
		uv_stream_t s;
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} io;
	int io_inited;
	int failing; /* failed inside link_open: told from the loop */
	uv_prepare_t flush;
	uv_check_t early; /* the flush after the poll phase */
	uv_connect_t connect;
	uv_getaddrinfo_t gai;
	int port;
	char *name; /* the TLS name: server_name or the host */

	redisReader *reader;
	sluice_redis_tls_session_t *tls;

	char *out; /* plaintext queued, not yet written */
	size_t outlen, outcap;
	unsigned unsent;   /* commands in out */
	uint64_t first_ns; /* uv_hrtime() when the first of them came */

	pending_t *fifo; /* ring of callbacks, one per command */
	size_t head, count, cap;
	sluice_redis_reply_fn *push_fn;
	void *push_priv;

	char rbuf[LINK_READ_SZ];
} link_t;

typedef struct write_s {
	uv_write_t req;
	link_t *l;
	char *buf;
} write_t;

static void link_fail(link_t *l, const char *why);
static void on_flush(uv_prepare_t *p);

/* -------------------------------------------------------------- memory */

static void link_release(link_t *l)
{
	sluice_redis_t *r = l->r;

	if (--l->open)
		return;
	sluice_redis__reader_free(l->reader);
	sluice_redis__tls_free(l->tls);
	free(l->out);
	free(l->fifo);
	free(l->name);
	free(l);
	r->released(r);
}

static void on_handle_closed(uv_handle_t *h)
{
	link_release(h->data);
}

/* ------------------------------------------------------------- callbacks */

static int fifo_push(link_t *l, sluice_redis_reply_fn *fn, void *priv)
{
	if (l->count == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16, i;
		pending_t *grown = malloc(cap * sizeof(*grown));

		if (!grown)
			return -1;
		for (i = 0; i < l->count; i++)
			grown[i] = l->fifo[(l->head + i) % l->cap];
		free(l->fifo);
		l->fifo = grown;
		l->head = 0;
		l->cap = cap;
	}
	assert(l->count < l->cap && l->head < l->cap);
	l->fifo[(l->head + l->count++) % l->cap] = (pending_t){fn, priv};
	return 0;
}

static int fifo_pop(link_t *l, pending_t *p)
{
	if (!l->count)
		return -1;
	/* FIFO pairing: the oldest command sent is the one answered. */
	assert(l->count <= l->cap && l->head < l->cap);
	*p = l->fifo[l->head];
	l->head = (l->head + 1) % l->cap;
	l->count--;
	return 0;
}

/* Every command still waiting gets NULL, oldest first. */
static void fail_pending(link_t *l)
{
	pending_t p;

	while (fifo_pop(l, &p) == 0)
		if (p.fn)
			p.fn(&l->pub, NULL, p.priv);
}

/* --------------------------------------------------------------- writing */

static void on_written(uv_write_t *req, int status)
{
	write_t *w = (write_t *)req;
	link_t *l = w->l;

	free(w->buf);
	free(w);
	if (status < 0 && l->state != L_CLOSED) {
		char why[128];

		snprintf(why, sizeof(why), "write: %s", uv_strerror(status));
		link_fail(l, why);
	}
	link_release(l);
}

/* Hands buf (malloc'd, len bytes) to the socket; it is freed when
 * written. */
static int write_raw(link_t *l, char *buf, size_t len)
{
	write_t *w = malloc(sizeof(*w));
	uv_buf_t b = uv_buf_init(buf, (unsigned)len);

	if (!w) {
		free(buf);
		return -1;
	}
	w->l = l;
	w->buf = buf;
	l->open++;
	if (uv_write(&w->req, &l->io.s, &b, 1, on_written) < 0) {
		free(buf);
		free(w);
		l->open--;
		return -1;
	}
	return 0;
}

/* Sends what TLS has produced (handshake records, alerts, data). */
static int write_tls_out(link_t *l)
{
	char *buf;
	size_t n = sluice_redis__tls_take_out(l->tls, &buf);

	return n ? write_raw(l, buf, n) : 0;
}

/* A write that failed: at once, or (defer) from the prepare handle, when
 * the caller is inside sluice_redis__link_send(), whose callers do not
 * expect the callbacks to run before it returns. */
static void write_failed(link_t *l, const char *why, int defer)
{
	if (!defer) {
		link_fail(l, why);
		return;
	}
	if (why)
		snprintf(l->pub.errstr, sizeof(l->pub.errstr), "%s", why);
	l->failing = 1;
	uv_prepare_start(&l->flush, on_flush);
}

/* Writes the queued commands: in one write as they are, or through TLS. */
static void flush_out(link_t *l, int defer)
{
	char *buf = l->out;
	size_t len = l->outlen;

	uv_prepare_stop(&l->flush);
	uv_check_stop(&l->early);
	if (l->state != L_UP || !len)
		return;
	l->unsent = 0;
	if (l->tls) {
		l->outlen = 0;
		if (sluice_redis__tls_write(l->tls, buf, len, l->pub.errstr,
					    sizeof(l->pub.errstr)) < 0) {
			l->pub.tls_failed = 1;
			write_failed(l, NULL, defer);
			return;
		}
		if (write_tls_out(l) < 0)
			write_failed(l, "write: out of memory", defer);
		return;
	}
	/* The buffer itself goes to the socket; a new one starts. */
	l->out = NULL;
	l->outlen = l->outcap = 0;
	if (write_raw(l, buf, len) < 0)
		write_failed(l, "write: could not queue", defer);
}

static void flush(link_t *l)
{
	flush_out(l, 0);
}

void sluice_redis__link_flush(sluice_redis_link_t *pub)
{
	link_t *l = (link_t *)pub;

	if (!l->failing)
		flush(l);
}

static void on_flush(uv_prepare_t *p)
{
	link_t *l = p->data;

	if (l->failing)
		link_fail(l, NULL);
	else
		flush(l);
}

static void on_early(uv_check_t *c)
{
	link_t *l = c->data;

	if (!l->failing)
		flush(l);
}

/* libuv runs the check handles last started first: started again, the
 * flush comes before any check handle started since (the replies just
 * read may have started the owner's). */
static void flush_first(link_t *l)
{
	if (!uv_is_active((uv_handle_t *)&l->early))
		return;
	uv_check_stop(&l->early);
	uv_check_start(&l->early, on_early);
}

/* A failure found while opening: the owner has no pointer to the link
 * yet, so it hears of it from the loop, like any other. */
static void fail_soon(link_t *l, const char *why)
{
	snprintf(l->pub.errstr, sizeof(l->pub.errstr), "%s", why);
	l->failing = 1;
	uv_prepare_start(&l->flush, on_flush);
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
	if (fifo_push(l, fn, priv) < 0)
		return -1;
	memcpy(l->out + l->outlen, resp, len);
	l->outlen += len;
	if (l->state != L_UP || l->failing)
		return 0;
	if (l->unsent++ == 0)
		l->first_ns = uv_hrtime();
	else if (l->unsent >= LINK_EARLY_CMDS &&
		 uv_hrtime() - l->first_ns >= LINK_EARLY_NS) {
		flush_out(l, 1);
		return 0;
	}
	if (!uv_is_active((uv_handle_t *)&l->flush)) {
		uv_prepare_start(&l->flush, on_flush);
		uv_check_start(&l->early, on_early);
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
		if (l->push_fn) {
			l->push_fn(&l->pub, reply, l->push_priv);
		} else if (fifo_pop(l, &p) < 0) {
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

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	link_t *l = h->data;

	(void)hint;
	*buf = uv_buf_init(l->rbuf, sizeof(l->rbuf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	link_t *l = s->data;

	if (l->state == L_CLOSED)
		return;
	if (nread < 0) {
		char why[128];

		snprintf(why, sizeof(why), "%s",
			 nread == UV_EOF ? "connection closed by the server"
					 : uv_strerror((int)nread));
		link_fail(l, why);
		return;
	}
	if (nread == 0)
		return;
	if (l->tls) {
		if (tls_input(l, buf->base, (size_t)nread) == 0)
			flush_first(l);
		return;
	}
	if (redisReaderFeed(l->reader, buf->base, (size_t)nread) != REDIS_OK) {
		link_fail(l, "out of memory");
		return;
	}
	if (dispatch(l) == 0)
		flush_first(l);
}

/* ------------------------------------------------------------ connecting */

static void connected(link_t *l, int status)
{
	char why[160];
	int rc;

	if (status < 0) {
		/* A reset here came from a server that accepted us and then
		 * dropped us before this callback ran. */
		if (status == UV_ECONNRESET)
			l->pub.reset = 1;
		snprintf(why, sizeof(why), "connect: %s", uv_strerror(status));
		link_fail(l, why);
		return;
	}
	l->pub.reached = 1;
	if ((rc = uv_read_start(&l->io.s, on_alloc, on_read)) < 0) {
		snprintf(why, sizeof(why), "read: %s", uv_strerror(rc));
		link_fail(l, why);
		return;
	}
	if (!l->tls) {
		link_up(l);
		return;
	}
	l->state = L_HANDSHAKE;
	tls_advance(l);
}

static void on_connected(uv_connect_t *req, int status)
{
	link_t *l = req->data;

	if (l->state != L_CLOSED)
		connected(l, status);
	link_release(l); /* the request's, which kept l alive until here */
}

static void connect_to(link_t *l, const struct sockaddr *sa)
{
	char why[160];
	int rc;

	l->state = L_CONNECTING;
	if ((rc = uv_tcp_init(l->r->loop, &l->io.tcp)) < 0) {
		snprintf(why, sizeof(why), "socket: %s", uv_strerror(rc));
		fail_soon(l, why);
		return;
	}
	l->io.h.data = l;
	l->io_inited = 1;
	l->open++;
	if (l->r->flags & SLUICE_REDIS_UNREF)
		uv_unref(&l->io.h);
	uv_tcp_nodelay(&l->io.tcp, 1);
	l->connect.data = l;
	if ((rc = uv_tcp_connect(&l->connect, &l->io.tcp, sa, on_connected)) <
	    0) {
		snprintf(why, sizeof(why), "connect: %s", uv_strerror(rc));
		fail_soon(l, why);
		return;
	}
	l->open++;
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	link_t *l = req->data;
	struct addrinfo *a;
	char why[160];

	if (l->state != L_CLOSED) {
		/* IPv4 first where a name has both: Redis binds 127.0.0.1
		 * by default, and "localhost" often resolves to ::1 first. */
		for (a = res; a && a->ai_family != AF_INET; a = a->ai_next)
			;
		if (status < 0 || !res) {
			snprintf(why, sizeof(why), "resolve: %s",
				 uv_strerror(status));
			link_fail(l, why);
		} else {
			connect_to(l, a ? a->ai_addr : res->ai_addr);
		}
	}
	uv_freeaddrinfo(res);
	link_release(l);
}

sluice_redis_link_t *sluice_redis__link_open(sluice_redis_t *r,
					     const char *host, int port,
					     const char *path, int tls,
					     sluice_redis_link_fn *on_state)
{
	link_t *l = calloc(1, sizeof(*l));
	struct sockaddr_storage sa;
	char why[160];
	int rc;

	if (!l)
		return NULL;
	l->r = r;
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
	if (!l->reader || (tls && (!r->tls || !l->tls))) {
		sluice_redis__reader_free(l->reader);
		sluice_redis__tls_free(l->tls);
		free(l->name);
		free(l);
		return NULL;
	}
	/* Counted in the client's open handles until its memory goes. */
	r->open_handles++;
	l->open = 2; /* the prepare and check handles */
	uv_prepare_init(r->loop, &l->flush);
	l->flush.data = l;
	uv_unref((uv_handle_t *)&l->flush);
	uv_check_init(r->loop, &l->early);
	l->early.data = l;
	uv_unref((uv_handle_t *)&l->early);

	if (path) {
		l->is_pipe = 1;
		l->state = L_CONNECTING;
		if ((rc = uv_pipe_init(r->loop, &l->io.pipe, 0)) < 0) {
			snprintf(why, sizeof(why), "socket: %s",
				 uv_strerror(rc));
			fail_soon(l, why);
			return &l->pub;
		}
		l->io.h.data = l;
		l->io_inited = 1;
		if (r->flags & SLUICE_REDIS_UNREF)
			uv_unref(&l->io.h);
		l->open++;
		l->connect.data = l;
		uv_pipe_connect(&l->connect, &l->io.pipe, path, on_connected);
		l->open++;
		return &l->pub;
	}
	if (uv_ip4_addr(host, port, (struct sockaddr_in *)&sa) == 0 ||
	    uv_ip6_addr(host, port, (struct sockaddr_in6 *)&sa) == 0) {
		connect_to(l, (struct sockaddr *)&sa);
		return &l->pub;
	}
	{
		struct addrinfo hints;
		char portstr[16];

		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		snprintf(portstr, sizeof(portstr), "%d", port);
		l->state = L_RESOLVING;
		l->gai.data = l;
		if ((rc = uv_getaddrinfo(r->loop, &l->gai, on_resolved, host,
					 portstr, &hints)) < 0) {
			snprintf(why, sizeof(why), "resolve: %s",
				 uv_strerror(rc));
			fail_soon(l, why);
			return &l->pub;
		}
		l->open++;
	}
	return &l->pub;
}

/* --------------------------------------------------------------- closing */

/* Stops I/O and runs the pending callbacks; the memory goes once the
 * handles are closed. */
static void link_teardown(link_t *l)
{
	l->state = L_CLOSED;
	uv_prepare_stop(&l->flush);
	uv_close((uv_handle_t *)&l->flush, on_handle_closed);
	uv_check_stop(&l->early);
	uv_close((uv_handle_t *)&l->early, on_handle_closed);
	if (l->io_inited) {
		l->io_inited = 0;
		uv_close(&l->io.h, on_handle_closed);
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
