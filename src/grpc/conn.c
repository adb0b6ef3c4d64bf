/*
 * conn.c -- one HTTP/2 connection of the gRPC listener.
 *
 * Bytes read go to nghttp2_session_mem_recv(), whose callbacks (call.c)
 * run the calls; what nghttp2 has to send is drained with
 * nghttp2_session_mem_send() into `out` and written with uv_try_write(),
 * the rest through uv_write() from `wbuf`.  While a write is pending or
 * GRPC_OUT_HIGH bytes wait, the connection reads nothing more: a client
 * that sends and never reads is bounded by its socket buffers.
 *
 * What a client may make us hold is bounded by nghttp2's settings (one
 * SETTINGS frame at the start: GRPC_MAX_STREAMS streams, a header list
 * size), by its limits on CONTINUATION frames and on streams reset
 * (CVE-2024-28182, CVE-2023-44487: past them nghttp2 sends GOAWAY), and by
 * call.c's caps on header and message bytes.
 *
 * A connection is closed with uv_close() and freed in its close callback,
 * never while a callback of its own is on the stack; calls still waiting
 * for a decision are detached first and finish alone.
 */
#include "grpc/internal.h"
#include "util/log.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static nghttp2_session_callbacks *callbacks;
static nghttp2_option *options;
static uv_once_t setup_once = UV_ONCE_INIT;

static void setup(void)
{
	if (nghttp2_session_callbacks_new(&callbacks) == 0)
		grpc_call_install(callbacks);
	if (nghttp2_option_new(&options) == 0) {
		nghttp2_option_set_stream_reset_rate_limit(
			options, GRPC_RESET_BURST, GRPC_RESET_RATE);
		nghttp2_option_set_max_continuations(options, 8);
		nghttp2_option_set_max_settings(options, 32);
		nghttp2_option_set_max_outbound_ack(options, 1000);
	}
}

unsigned grpc_conn_idle_timeout_ms(const grpc_conn_t *c)
{
	unsigned t = c->g->svc->live->cfg->idle_timeout_ms;

	return t ? t : 30000;
}

size_t grpc_conn_max_message(const grpc_conn_t *c)
{
	size_t n = c->g->svc->live->cfg->grpc.max_message_bytes;

	return n ? n : SLUICE_GRPC_DEFAULT_MAX_MESSAGE;
}

/* ------------------------------------------------------------- closing */

static void on_close(uv_handle_t *h)
{
	grpc_conn_t *c = h->data;

	grpc_call_detach_all(c);
	assert(c->held == 0);
	nghttp2_session_del(c->session);
	sluice_buf_free(&c->out);
	sluice_buf_free(&c->wbuf);
	sluice_count(&c->g->svc->metrics->connections, (uint64_t)-1);
	free(c);
}

void grpc_conn_close(grpc_conn_t *c)
{
	sluice_grpc_t *g = c->g;

	if (c->closing)
		return;
	c->closing = 1;
	if (c->prev)
		c->prev->next = c->next;
	else
		g->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
	g->nconns--;
	uv_close(&c->h.handle, on_close);
}

/* GOAWAY naming the last stream we took: those are answered, later ones
 * the client retries elsewhere.  The connection closes once nghttp2
 * wants neither to read nor to write (grpc_conn_flush). */
void grpc_conn_goaway(grpc_conn_t *c, uint32_t error, const char *why)
{
	if (c->goaway || c->closing)
		return;
	c->goaway = 1;
	nghttp2_submit_goaway(
		c->session, NGHTTP2_FLAG_NONE,
		nghttp2_session_get_last_proc_stream_id(c->session), error,
		(const uint8_t *)why, why ? strlen(why) : 0);
}

/* The drain: calls in flight are answered, and calls the client sent
 * before it hears of the drain too (a shutdown notice is a GOAWAY that
 * still takes every stream; Health/Check then says NOT_SERVING).  The
 * real GOAWAY goes once no call is left. */
void grpc_conn_drain(grpc_conn_t *c)
{
	if (c->goaway || c->closing || c->notice)
		return;
	if (!c->calls) {
		grpc_conn_goaway(c, NGHTTP2_NO_ERROR, NULL);
		return;
	}
	c->notice = 1;
	nghttp2_submit_shutdown_notice(c->session);
}

/* ------------------------------------------------------------- writing */

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

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

/* Hands out to the kernel; what it does not take goes through
 * uv_write.  Returns -1 when the connection closed. */
static int write_out(grpc_conn_t *c)
{
	sluice_buf_t tmp;
	uv_buf_t b;
	int r;

	if (c->writing || c->out.len == 0)
		return 0;
	b = uv_buf_init(c->out.data, (unsigned)c->out.len);
	r = uv_try_write(&c->h.stream, &b, 1);
	if (r == (int)c->out.len) {
		c->out.len = 0;
		if (c->out.cap > 65536)
			sluice_buf_free(&c->out);
		return 0;
	}
	if (r < 0 && r != UV_EAGAIN) {
		grpc_conn_close(c);
		return -1;
	}
	if (r > 0)
		sluice_buf_consume(&c->out, (size_t)r);
	tmp = c->wbuf;
	c->wbuf = c->out;
	c->out = tmp;
	c->out.len = 0;
	b = uv_buf_init(c->wbuf.data, (unsigned)c->wbuf.len);
	c->wreq.data = c;
	if (uv_write(&c->wreq, &c->h.stream, &b, 1, on_write) < 0) {
		grpc_conn_close(c);
		return -1;
	}
	c->writing = 1;
	return 0;
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

void grpc_conn_flush(grpc_conn_t *c)
{
	if (c->closing || c->in_recv)
		return;
	if (c->notice && !c->calls)
		grpc_conn_goaway(c, NGHTTP2_NO_ERROR, NULL);
	/* nghttp2 serialises frames while we have room for them. */
	while (c->out.len < GRPC_OUT_HIGH) {
		const uint8_t *data;
		ssize_t n = nghttp2_session_mem_send(c->session, &data);

		if (n < 0) {
			grpc_conn_close(c);
			return;
		}
		if (n == 0)
			break;
		sluice_buf_append(&c->out, data, (size_t)n);
		if (c->out.oom) {
			sluice_log_error("grpc: out of memory writing frames");
			grpc_conn_close(c);
			return;
		}
		c->touch_ms = uv_now(c->g->loop);
	}
	if (write_out(c) < 0)
		return;
	if (!nghttp2_session_want_read(c->session) &&
	    !nghttp2_session_want_write(c->session) && !c->writing &&
	    c->out.len == 0) {
		grpc_conn_close(c);
		return;
	}
	set_reading(c, !c->writing && c->out.len < GRPC_OUT_HIGH &&
			       nghttp2_session_want_read(c->session));
}

/* ------------------------------------------------------------- reading */

/* The client preface is checked here before nghttp2 sees it, so that an
 * HTTP/1.1 client is told what this port speaks instead of being cut
 * off.  Returns 0 to go on, -1 when the connection is done. */
static int check_preface(grpc_conn_t *c, const char *p, size_t n)
{
	static const char answer[] =
		"HTTP/1.1 505 HTTP Version Not Supported\r\n"
		"Content-Type: text/plain\r\n"
		"Connection: close\r\n"
		"Content-Length: 81\r\n\r\n"
		"this port speaks gRPC over HTTP/2 (h2c with prior knowledge) "
		"only, not HTTP/1.x\n";
	size_t want = sizeof(PREFACE) - 1 - c->preface;
	size_t k = n < want ? n : want;

	if (memcmp(p, PREFACE + c->preface, k) == 0) {
		c->preface += k;
		return 0;
	}
	if (c->preface == 0 && n > 0 && p[0] >= 'A' && p[0] <= 'Z') {
		uv_buf_t b = uv_buf_init((char *)answer, sizeof(answer) - 1);

		/* One small answer: the kernel takes it whole. */
		uv_try_write(&c->h.stream, &b, 1);
	}
	grpc_conn_close(c);
	return -1;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	grpc_conn_t *c = s->data;
	ssize_t r;

	if (n == 0)
		return;
	if (n < 0) {
		grpc_conn_close(c);
		return;
	}
	if (c->preface < sizeof(PREFACE) - 1 &&
	    check_preface(c, buf->base, (size_t)n) < 0)
		return;
	c->touch_ms = uv_now(c->g->loop);
	c->in_recv = 1;
	r = nghttp2_session_mem_recv(c->session, (const uint8_t *)buf->base,
				     (size_t)n);
	c->in_recv = 0;
	if (r < 0) {
		/* A connection error: nghttp2 has queued a GOAWAY when it
		 * could; send it, then close. */
		c->goaway = 1;
		nghttp2_session_terminate_session(c->session,
						  NGHTTP2_PROTOCOL_ERROR);
	}
	if (c->closing)
		return;
	if (c->resets > GRPC_RESET_TOTAL)
		grpc_conn_goaway(c, NGHTTP2_ENHANCE_YOUR_CALM,
				 "too many streams reset");
	grpc_conn_flush(c);
}

/* ------------------------------------------------------------ accepting */

static int start_session(grpc_conn_t *c)
{
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS},
		{NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_MAX_HEADER_BYTES},
	};

	uv_once(&setup_once, setup);
	if (!callbacks || !options ||
	    nghttp2_session_server_new2(&c->session, callbacks, c, options) !=
		    0)
		return -1;
	return nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv,
				       sizeof(iv) / sizeof(iv[0]));
}

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
	c->next = g->conns;
	if (g->conns)
		g->conns->prev = c;
	g->conns = c;
	g->nconns++;
	sluice_count(&g->svc->metrics->accepted, 1);
	sluice_count(&g->svc->metrics->connections, 1);
	c->touch_ms = uv_now(g->loop);
	if (start_session(c) < 0) {
		sluice_log_error("grpc: cannot start an HTTP/2 session");
		grpc_conn_close(c);
		return;
	}
	if (g->draining)
		grpc_conn_drain(c);
	/* Our SETTINGS go out after the client's preface arrives: an
	 * HTTP/1.1 client gets a plain answer, not a binary frame. */
	set_reading(c, 1);
}
