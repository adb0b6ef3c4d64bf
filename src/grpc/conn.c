/*
 * conn.c -- the socket of one gRPC connection (TCP or Unix): accepting,
 * reading into the session (session.c), writing what it has to send, and
 * closing.
 *
 * Output goes out with uv_try_write(); what the kernel does not take
 * goes through uv_write() from `wbuf` (c->writing meanwhile).  A
 * connection is closed with uv_close() and released and freed in its
 * close callback.
 */
#include "grpc/internal.h"
#include "util/log.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void on_close(uv_handle_t *h)
{
	grpc_conn_t *c = h->data;

	grpc_conn_release(c);
	grpc_tls_free(c);
	free(c);
}

static void sock_close(grpc_conn_t *c)
{
	uv_close(&c->h.handle, on_close);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	grpc_conn_t *c = h->data;

	*buf = uv_buf_init(c->g->rbuf, sizeof(c->g->rbuf));
}

static void on_write(uv_write_t *req, int status)
{
	grpc_conn_t *c = req->data;

	c->writing = 0;
	c->wbuf.len = 0;
	if (c->wbuf.cap > 65536)
		sluice_buf_free(&c->wbuf);
	if (c->closing)
		return;
	if (status < 0) {
		grpc_conn_close(c);
		return;
	}
	grpc_conn_flush(c);
}

/* Hands src (c->out, or c->tls.cipher under TLS) to the kernel; what it
 * does not take goes through uv_write.  Returns -1 when the connection
 * closed. */
static int send_buf(grpc_conn_t *c, sluice_buf_t *src)
{
	sluice_buf_t tmp;
	uv_buf_t b;
	int r;

	if (c->writing || src->len == 0)
		return 0;
	b = uv_buf_init(src->data, (unsigned)src->len);
	r = uv_try_write(&c->h.stream, &b, 1);
	if (r == (int)src->len) {
		src->len = 0;
		if (src->cap > 65536)
			sluice_buf_free(src);
		return 0;
	}
	if (r < 0 && r != UV_EAGAIN) {
		grpc_conn_close(c);
		return -1;
	}
	if (r > 0)
		sluice_buf_consume(src, (size_t)r);
	tmp = c->wbuf;
	c->wbuf = *src;
	*src = tmp;
	src->len = 0;
	b = uv_buf_init(c->wbuf.data, (unsigned)c->wbuf.len);
	c->wreq.data = c;
	if (uv_write(&c->wreq, &c->h.stream, &b, 1, on_write) < 0) {
		grpc_conn_close(c);
		return -1;
	}
	c->writing = 1;
	return 0;
}

static int write_out(grpc_conn_t *c)
{
	return send_buf(c, &c->out);
}

/* Under TLS: what the session wrote, encrypted, then sent. */
static int tls_write_out(grpc_conn_t *c)
{
	if (c->writing)
		return 0;
	if (grpc_tls_out(c) < 0) {
		grpc_conn_close(c);
		return -1;
	}
	return send_buf(c, &c->tls.cipher);
}

static void set_reading(grpc_conn_t *c, int on)
{
	if (on == (int)c->reading || c->closing)
		return;
	if (on) {
		if (uv_read_start(&c->h.stream, on_alloc, on_read) < 0) {
			grpc_conn_close(c);
			return;
		}
	} else {
		uv_read_stop(&c->h.stream);
	}
	c->reading = (unsigned)on;
}

static void peer_name(grpc_conn_t *c, char *out, size_t len)
{
	struct sockaddr_storage ss;
	int n = sizeof(ss);
	char ip[64];

	if (c->g->is_unix) {
		snprintf(out, len, "a client on the Unix socket");
		return;
	}
	memset(&ss, 0, sizeof(ss));
	if (uv_tcp_getpeername(&c->h.tcp, (struct sockaddr *)&ss, &n) < 0) {
		snprintf(out, len, "a client gone");
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;

		uv_ip6_name(a, ip, sizeof(ip));
		snprintf(out, len, "[%s]:%u", ip, ntohs(a->sin6_port));
	} else {
		const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;

		uv_ip4_name(a, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
	}
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	grpc_conn_t *c = s->data;

	if (n == 0)
		return;
	if (n < 0) {
		grpc_conn_close(c);
		return;
	}
	if (!c->tls.ssl) {
		grpc_conn_feed(c, (const uint8_t *)buf->base, (size_t)n);
		return;
	}
	if (grpc_tls_in(c, (const uint8_t *)buf->base, (size_t)n) < 0) {
		/* A refused handshake's alert goes out if it can. */
		send_buf(c, &c->tls.cipher);
		if (!c->closing)
			grpc_conn_close(c);
		return;
	}
	if (!c->closing)
		tls_write_out(c);
}

static const grpc_io_t sock_io = {write_out, set_reading, sock_close,
				  peer_name};
static const grpc_io_t tls_io = {tls_write_out, set_reading, sock_close,
				 peer_name};

static void free_unaccepted(uv_handle_t *h)
{
	free(h->data);
}

void grpc_conn_accept(sluice_grpc_t *g)
{
	grpc_conn_t *c = calloc(1, sizeof(*c));

	if (!c) {
		sluice_log_error("grpc: out of memory accepting a connection");
		return;
	}
	c->g = g;
	if (g->is_unix)
		uv_pipe_init(g->loop, &c->h.pipe, 0);
	else
		uv_tcp_init(g->loop, &c->h.tcp);
	c->h.handle.data = c;
	if (uv_accept(&g->listener.stream, &c->h.stream) < 0) {
		uv_close(&c->h.handle, free_unaccepted);
		return;
	}
	if (!g->is_unix)
		uv_tcp_nodelay(&c->h.tcp, 1);
	if (!g->svc->live->cfg->grpc.tls.cert_file) {
		grpc_conn_start(g, c, &sock_io);
		return;
	}
	c->io = &tls_io; /* for the log's peer name */
	if (grpc_tls_start(c) < 0) {
		uv_close(&c->h.handle, free_unaccepted);
		return;
	}
	grpc_conn_start(g, c, &tls_io);
}
