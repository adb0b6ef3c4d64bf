/*
 * tcp.c -- connections on sockets: reads, writes, timeouts, closing.
 *
 * Writes try uv_try_write() first (one syscall, no request object); only
 * what the kernel did not take goes through uv_write().  While a write or
 * a decision is pending the connection stops reading.  A client that
 * pipelines requests and never reads the answers is bounded twice: a
 * connection parses no further while SLUICE_OUT_HIGH bytes of answers
 * are unsent, and, once the loop's connections together hold
 * held_budget bytes, a connection with any unsent answer parses no
 * further.  What such a client costs is then one read buffer of
 * requests plus SLUICE_OUT_HIGH of answers, and the total is bounded.
 *
 * Closing after an error answer (400, 413, 431) shuts our side down and
 * keeps reading for a moment (lingering close): closing at once while the
 * client is still sending would make the kernel send RST and the client
 * could lose the answer.
 *
 * HTTPS (http.tls, admin.tls) sits between the socket and the HTTP
 * machine (util/tls_server.h, shared with the gRPC listener): the bytes
 * read go through the TLS session and its plaintext to
 * sluice_conn_feed(); answers are encrypted from conn.out only when no
 * write is pending, so unsent answers stay in conn.out and the bounds
 * above hold as over cleartext.
 */
#include "serve/server.h"
#include "util/invariant.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINGER_MS 2000
/* SIGTERM: connections still open this long after are closed. */
#define DRAIN_MS 10000

static const sluice_conn_io_t tcp_io;

/* The TLS contexts of `listen` (http.tls) and admin.listen (admin.tls),
 * one each for every loop thread. */
static sluice_tls_source_t http_source =
	SLUICE_TLS_SOURCE_INIT("http.tls", NULL);
static sluice_tls_source_t admin_source =
	SLUICE_TLS_SOURCE_INIT("admin.tls", NULL);

void sluice_tcp_tls_hold(void)
{
	sluice_tls_source_hold(&http_source);
	sluice_tls_source_hold(&admin_source);
}

void sluice_tcp_tls_drop(void)
{
	sluice_tls_source_drop(&http_source);
	sluice_tls_source_drop(&admin_source);
}

/* The tls: block that applies to t's listener. */
static const sluice_tls_server_config_t *tls_config(sluice_tcp_t *t)
{
	const sluice_config_t *cfg = t->w->svc.live->cfg;

	return t->conn.admin_port ? &cfg->admin_tls : &cfg->http_tls;
}

static sluice_tcp_t *tcp_of(sluice_conn_t *c)
{
	return (sluice_tcp_t *)((char *)c - offsetof(sluice_tcp_t, conn));
}

static unsigned idle_timeout_ms(sluice_worker_t *w)
{
	return sluice_config_idle_timeout_ms(w->svc.live->cfg);
}

static void list_remove(sluice_tcp_t *t)
{
	t->prev->next = t->next;
	t->next->prev = t->prev;
	t->prev = t->next = t;
}

static void list_append(sluice_worker_t *w, sluice_tcp_t *t)
{
	t->prev = w->conns.prev;
	t->next = &w->conns;
	w->conns.prev->next = t;
	w->conns.prev = t;
}

/* ------------------------------------------------------------- closing */

/* Keeps w->held equal to the bytes the connections buffer. */
static void account(sluice_tcp_t *t)
{
	size_t held = t->conn.in.len + t->conn.out.len + t->wbuf.len +
		      t->tls.cipher.len;

	/* The loop's total is the sum of its connections' shares. */
	SLUICE_ASSERT(t->w->held >= t->held);
	t->w->held = t->w->held - t->held + held;
	t->held = held;
}

/* How many unsent answer bytes stop this connection's parsing. */
static void set_out_high(sluice_tcp_t *t)
{
	t->conn.out_high = t->w->held > t->w->held_budget ? 1 : SLUICE_OUT_HIGH;
}

static void on_close(uv_handle_t *h)
{
	sluice_tcp_t *t = h->data;

	sluice_count(&t->w->svc.metrics->connections, (uint64_t)-1);
	SLUICE_ASSERT(t->w->held >= t->held);
	t->w->held -= t->held;
	t->held = 0;
	sluice_buf_free(&t->wbuf);
	sluice_tls_conn_free(&t->tls);
	if (sluice_conn_release(&t->conn))
		free(t);
	/* else: a decision is pending; tcp_release() frees it later */
}

static void tcp_close(sluice_tcp_t *t)
{
	if (t->closing)
		return;
	t->closing = 1;
	list_remove(t);
	t->w->nconns--;
	uv_close((uv_handle_t *)&t->handle, on_close);
}

static void tcp_release(sluice_conn_t *c)
{
	free(tcp_of(c));
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	sluice_tcp_t *t = req->data;

	if (status < 0)
		tcp_close(t);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void start_reading(sluice_tcp_t *t);

/* Our answers are all written and we want to close: shut our side, read
 * and discard until the peer closes or LINGER_MS pass. */
static void linger(sluice_tcp_t *t)
{
	if (t->lingering || t->closing)
		return;
	t->lingering = 1;
	t->touch_ms = uv_now(&t->w->loop);
	if (t->tls.ssl) {
		/* Our close_notify: a client reading to the end knows the
		 * answer was not cut short.  Best effort (a few bytes). */
		uv_buf_t b;

		sluice_tls_conn_shutdown(&t->tls);
		b = uv_buf_init(t->tls.cipher.data,
				(unsigned)t->tls.cipher.len);
		if (b.len)
			uv_try_write((uv_stream_t *)&t->handle, &b, 1);
		t->tls.cipher.len = 0;
	}
	t->sreq.data = t;
	if (uv_shutdown(&t->sreq, (uv_stream_t *)&t->handle, on_shutdown) < 0) {
		tcp_close(t);
		return;
	}
	start_reading(t);
}

/* ------------------------------------------------------------- writing */

static void after_io(sluice_tcp_t *t);

static void on_write(uv_write_t *req, int status)
{
	sluice_tcp_t *t = req->data;

	t->writing = 0;
	t->wbuf.len = 0;
	if (t->wbuf.cap > 16384) /* a burst of pipelined answers: let go */
		sluice_buf_free(&t->wbuf);
	if (t->conn.out.cap > 16384 && t->conn.out.len == 0)
		sluice_buf_free(&t->conn.out);
	if (t->closing)
		return;
	if (status < 0) {
		tcp_close(t);
		return;
	}
	after_io(t);
}

static void flush(sluice_tcp_t *t)
{
	sluice_buf_t *out = &t->conn.out;
	uv_buf_t b;
	int r;

	if (t->writing)
		return;
	/* HTTPS: the answers (and what the handshake has to send) go out
	 * as records; cipher is empty again once this is done. */
	if (t->tls.ssl) {
		if (sluice_tls_conn_out(&t->tls, out) < 0) {
			tcp_close(t);
			return;
		}
		out = &t->tls.cipher;
	}
	if (out->len == 0)
		return;
	b = uv_buf_init(out->data, (unsigned)out->len);
	r = uv_try_write((uv_stream_t *)&t->handle, &b, 1);
	if (r == (int)out->len) {
		out->len = 0;
		/* The kernel took a burst of pipelined answers: do not keep
		 * its buffer for the connection's life. */
		if (out->cap > 4096)
			sluice_buf_free(out);
		return;
	}
	if (r < 0 && r != UV_EAGAIN) {
		tcp_close(t);
		return;
	}
	if (r > 0)
		sluice_buf_consume(out, (size_t)r);
	/* The rest goes through uv_write from wbuf, which stays untouched
	 * until on_write; new answers keep accumulating in out. */
	{
		sluice_buf_t tmp = t->wbuf;

		t->wbuf = *out;
		*out = tmp;
		out->len = 0;
	}
	b = uv_buf_init(t->wbuf.data, (unsigned)t->wbuf.len);
	t->wreq.data = t;
	if (uv_write(&t->wreq, (uv_stream_t *)&t->handle, &b, 1, on_write) <
	    0) {
		tcp_close(t);
		return;
	}
	t->writing = 1;
}

/* ------------------------------------------------------------- reading */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	sluice_tcp_t *t = h->data;

	*buf = uv_buf_init(t->w->rbuf, sizeof(t->w->rbuf));
}

static void start_reading(sluice_tcp_t *t)
{
	if (t->reading || t->closing)
		return;
	if (uv_read_start((uv_stream_t *)&t->handle, on_alloc, on_read) < 0) {
		tcp_close(t);
		return;
	}
	t->reading = 1;
}

static void stop_reading(sluice_tcp_t *t)
{
	if (!t->reading)
		return;
	uv_read_stop((uv_stream_t *)&t->handle);
	t->reading = 0;
}

/* After bytes came in or went out: write what is ready, then decide
 * whether to read on, wait, or close. */
static void after_io(sluice_tcp_t *t)
{
	for (;;) {
		if (t->closing)
			return;
		flush(t);
		if (t->closing)
			return;
		account(t);
		if (t->writing || sluice_conn_waiting(&t->conn)) {
			stop_reading(t);
			return;
		}
		if (t->conn.want_close) {
			linger(t);
			return;
		}
		if (!t->conn.in.len)
			break;
		/* Requests held back while a write or a decision was
		 * pending: each round answers at least one. */
		set_out_high(t);
		sluice_conn_resume(&t->conn);
	}
	start_reading(t);
}

static int tls_feed(void *arg, const uint8_t *p, size_t n)
{
	sluice_tcp_t *t = arg;

	set_out_high(t);
	sluice_conn_feed(&t->conn, (const char *)p, n);
	return t->closing;
}

/* "1.2.3.4:80" or "[::1]:80", for a log line. */
static void peer_name(const sluice_tcp_t *t, char *out, size_t len)
{
	const struct sockaddr_storage *ss = &t->conn.peer;
	char ip[64] = "?";

	if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;

		uv_ip6_name(a, ip, sizeof(ip));
		snprintf(out, len, "[%s]:%u", ip, ntohs(a->sin6_port));
	} else {
		const struct sockaddr_in *a = (const void *)ss;

		uv_ip4_name(a, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, ntohs(a->sin_port));
	}
}

/* Ciphertext read: the handshake, then requests.  A handshake refused
 * (plaintext HTTP, garbage, a wrong certificate) gets its alert, if
 * OpenSSL made one, and the connection closes. */
static void tls_read(sluice_tcp_t *t, const char *p, size_t n)
{
	const char *what = t->conn.admin_port ? "admin.tls" : "http.tls";
	char peer[96], why[256];
	uv_buf_t b;
	int r;

	r = sluice_tls_conn_in(&t->tls, tls_config(t), (const uint8_t *)p, n,
			       tls_feed, t, why, sizeof(why));
	if (r == 0) {
		after_io(t);
		return;
	}
	if (r == SLUICE_TLS_PLAINTEXT) {
		/* http:// to an https:// port (nginx answers this too): a
		 * 400 in cleartext, then the lingering close of any 400. */
		sluice_tls_conn_free(&t->tls);
		t->conn.keep_alive = 0;
		t->conn.want_close = 1;
		t->conn.t_start_ns = sluice_conn_clock_ns();
		sluice_resp_error(&t->conn, 400, "https_required", NULL,
				  "this port speaks HTTPS: use https://");
		after_io(t);
		return;
	}
	if (r == SLUICE_TLS_HANDSHAKE || r == SLUICE_TLS_SAN) {
		peer_name(t, peer, sizeof(peer));
		if (r == SLUICE_TLS_HANDSHAKE)
			sluice_log_warn("%s: TLS handshake with %s failed: %s",
					what, peer, why);
		else
			sluice_log_warn("%s: TLS client %s refused: its "
					"certificate names none of "
					"%s.client_sans",
					what, peer, what);
	}
	b = uv_buf_init(t->tls.cipher.data, (unsigned)t->tls.cipher.len);
	if (b.len && !t->writing)
		uv_try_write((uv_stream_t *)&t->handle, &b, 1);
	tcp_close(t);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	sluice_tcp_t *t = s->data;

	if (t->lingering) {
		if (n < 0)
			tcp_close(t);
		return;
	}
	if (n < 0) {
		if (n != UV_EOF || t->conn.out.len == 0) {
			tcp_close(t);
			return;
		}
		sluice_conn_eof(&t->conn);
		after_io(t);
		return;
	}
	if (n == 0)
		return;
	if (t->tls.ssl) {
		tls_read(t, buf->base, (size_t)n);
		return;
	}
	set_out_high(t);
	sluice_conn_feed(&t->conn, buf->base, (size_t)n);
	after_io(t);
}

/* --------------------------------------------------- conn io callbacks */

static void tcp_begin(sluice_conn_t *c)
{
	sluice_tcp_t *t = tcp_of(c);

	t->touch_ms = uv_now(&t->w->loop);
	/* Past its age, the answer to this request closes the connection
	 * (the client connects again, maybe to another replica). */
	if (t->age_ms && t->touch_ms - t->born_ms >= t->age_ms)
		t->conn.aged = 1;
}

static void tcp_wake(sluice_conn_t *c)
{
	sluice_tcp_t *t = tcp_of(c);

	t->touch_ms = uv_now(&t->w->loop);
	after_io(t);
}

static const sluice_conn_io_t tcp_io = {
	.begin = tcp_begin,
	.wake = tcp_wake,
	.release = tcp_release,
};

/* ------------------------------------------------------------ accepting */

/* With a tls: block for the listener, t's TLS session; -1 when there is
 * no usable context (logged by the source). */
static int tls_accept(sluice_tcp_t *t, int admin)
{
	const sluice_config_t *cfg = t->w->svc.live->cfg;
	const sluice_tls_server_config_t *tc =
		admin ? &cfg->admin_tls : &cfg->http_tls;
	sluice_tls_source_t *src = admin ? &admin_source : &http_source;
	struct ssl_st *ssl;
	int failed;

	if (!tc->cert_file)
		return 0;
	ssl = sluice_tls_source_session(src, tc, uv_now(&t->w->loop), &failed);
	if (failed)
		sluice_count(
			&t->w->svc.metrics
				 ->tls_reload_failures[admin ? SLUICE_TLS_ADMIN
							     : SLUICE_TLS_HTTP],
			1);
	if (!ssl)
		return -1;
	return sluice_tls_conn_start(&t->tls, ssl);
}

void sluice_tcp_on_connection(uv_stream_t *listener, int status)
{
	sluice_worker_t *w = listener->data;
	struct sockaddr_storage peer;
	int plen = sizeof(peer);
	sluice_tcp_t *t;

	if (status < 0)
		return;
	t = calloc(1, sizeof(*t));
	if (!t) {
		sluice_log_error("out of memory accepting a connection");
		return;
	}
	uv_tcp_init(&w->loop, &t->handle);
	t->handle.data = t;
	t->w = w;
	t->prev = t->next = t;
	if (uv_accept(listener, (uv_stream_t *)&t->handle) < 0) {
		uv_close((uv_handle_t *)&t->handle, (uv_close_cb)free);
		return;
	}
	if (tls_accept(t, listener == (uv_stream_t *)&w->admin_listener) < 0) {
		uv_close((uv_handle_t *)&t->handle, (uv_close_cb)free);
		return;
	}
	memset(&peer, 0, sizeof(peer));
	uv_tcp_getpeername(&t->handle, (struct sockaddr *)&peer, &plen);
	uv_tcp_nodelay(&t->handle, 1);
	sluice_conn_init(&t->conn, &w->svc, &tcp_io,
			 (const struct sockaddr *)&peer);
	t->conn.admin_port = listener == (uv_stream_t *)&w->admin_listener;
	t->conn.admin_apart = w->admin_apart != 0;
	t->touch_ms = uv_now(&w->loop);
	t->born_ms = t->touch_ms;
	t->age_ms = sluice_config_jitter_age(
		sluice_config_http_max_age_ms(w->svc.live->cfg));
	list_append(w, t);
	w->nconns++;
	sluice_count(&w->svc.metrics->accepted, 1);
	sluice_count(&w->svc.metrics->connections, 1);
	start_reading(t);
}

/* ------------------------------------------------------------- timeouts */

static void timed_out(sluice_tcp_t *t)
{
	sluice_count(&t->w->svc.metrics->timeouts, 1);
	if (!t->conn.in_message || t->writing) {
		tcp_close(t);
		return;
	}
	/* A request that started but did not arrive in time. */
	t->conn.keep_alive = 0;
	t->conn.want_close = 1;
	t->conn.in_message = 0;
	sluice_resp_error(&t->conn, 408, "request_timeout", NULL,
			  "the request did not arrive within idle_timeout_ms");
	after_io(t);
}

void sluice_tcp_sweep(sluice_worker_t *w)
{
	uint64_t now = uv_now(&w->loop), timeout = idle_timeout_ms(w);
	int forced = w->drain_deadline_ms && now >= w->drain_deadline_ms;
	sluice_tcp_t *t, *next;

	for (t = w->conns.next; t != &w->conns; t = next) {
		next = t->next;
		if (forced) {
			tcp_close(t);
		} else if (t->lingering) {
			if (now - t->touch_ms >= LINGER_MS)
				tcp_close(t);
		} else if (sluice_conn_waiting(&t->conn)) {
			continue; /* the store has its own timeout */
		} else if (now - t->touch_ms >= timeout) {
			timed_out(t);
		}
	}
}

void sluice_tcp_drain(sluice_worker_t *w)
{
	sluice_tcp_t *t, *next;

	w->svc.draining = 1;
	w->drain_deadline_ms = uv_now(&w->loop) + DRAIN_MS;
	for (t = w->conns.next; t != &w->conns; t = next) {
		next = t->next;
		/* Busy connections close after their answer (resp_end sees
		 * svc.draining and sends Connection: close). */
		if (sluice_conn_idle(&t->conn) && !t->writing &&
		    t->conn.out.len == 0)
			tcp_close(t);
	}
}

void sluice_tcp_close_all(sluice_worker_t *w)
{
	while (w->conns.next != &w->conns)
		tcp_close(w->conns.next);
}
