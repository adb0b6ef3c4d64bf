/*
 * session.c -- the HTTP/2 session of one gRPC connection, from bytes in
 * to bytes out, whatever carries them.
 *
 * grpc_conn_feed() checks the client preface and hands what arrives to
 * nghttp2_session_mem_recv(), whose callbacks (stream.c) run the calls;
 * what goes out, GOAWAY and the cut-offs are session_out.c's, which the
 * calls use too.
 *
 * What a client may make us hold is bounded by nghttp2's settings (one
 * SETTINGS frame at the start: GRPC_MAX_STREAMS streams, a header list
 * size), by its limits on CONTINUATION frames and queued control frames
 * (CVE-2024-28182), by the reset bucket (session_out.c, CVE-2023-44487),
 * and by stream.c's caps on header and message bytes.  A flood ends in
 * GOAWAY(ENHANCE_YOUR_CALM), counted and logged (grpc_conn_refuse).
 *
 * The transport frees a connection (grpc_conn_release) only after
 * grpc_conn_close() and never while a callback of its own is on the
 * stack; calls still waiting for a decision are detached first and
 * finish alone.
 */
#include "grpc/internal.h"
#include "util/invariant.h"
#include "util/log.h"

#include <stdio.h>
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
		/* Only a backstop: grpc_conn_count_reset() cuts a flood
		 * off first, with ENHANCE_YOUR_CALM rather than nghttp2's
		 * INTERNAL_ERROR, and says so. */
		nghttp2_option_set_stream_reset_rate_limit(
			options, 2 * GRPC_RESET_BURST, 2 * GRPC_RESET_RATE);
		nghttp2_option_set_max_continuations(options, 8);
		nghttp2_option_set_max_settings(options, 32);
		nghttp2_option_set_max_outbound_ack(options, 1000);
	}
}

/* ---------------------------------------------------------- lifetime */

int grpc_conn_start(sluice_grpc_t *g, grpc_conn_t *c, const grpc_io_t *io)
{
	nghttp2_settings_entry iv[] = {
		{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS},
		{NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, GRPC_MAX_HEADER_BYTES},
	};

	c->g = g;
	c->io = io;
	c->next = g->conns;
	if (g->conns)
		g->conns->prev = c;
	g->conns = c;
	g->nconns++;
	sluice_count(&g->svc->metrics->grpc_accepted, 1);
	sluice_count(&g->svc->metrics->grpc_connections, 1);
	c->touch_ms = uv_now(g->loop);
	c->born_ms = c->touch_ms;
	c->age_ms = sluice_config_jitter_age(
		sluice_config_grpc_max_age_ms(g->svc->live->cfg));
	c->age_grace_ms =
		sluice_config_grpc_max_age_grace_ms(g->svc->live->cfg);
	c->reset_ms = c->touch_ms;
	c->answer_ms = c->touch_ms;
	c->reset_tokens = GRPC_RESET_BURST;
	uv_once(&setup_once, setup);
	if (!callbacks || !options ||
	    nghttp2_session_server_new2(&c->session, callbacks, c, options) !=
		    0 ||
	    nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv,
				    sizeof(iv) / sizeof(iv[0])) != 0) {
		sluice_log_error("grpc: cannot start an HTTP/2 session");
		grpc_conn_close(c);
		return -1;
	}
	if (g->draining)
		grpc_conn_drain(c);
	/* Our SETTINGS go out after the client's preface arrives: an
	 * HTTP/1.1 client gets a plain answer, not a binary frame. */
	c->io->read(c, 1);
	return 0;
}

void grpc_conn_release(grpc_conn_t *c)
{
	grpc_call_detach_all(c);
	SLUICE_ASSERT(c->held == 0);
	nghttp2_session_del(c->session);
	c->session = NULL;
	sluice_buf_free(&c->out);
	sluice_buf_free(&c->wbuf);
	sluice_count(&c->g->svc->metrics->grpc_connections, (uint64_t)-1);
}

/* ------------------------------------------------------------- reading */

/* What nghttp2_session_mem_recv()'s error says of the client. */
static grpc_refusal_t refusal_of(ssize_t err)
{
	switch (err) {
	case NGHTTP2_ERR_FLOODED:
	case NGHTTP2_ERR_TOO_MANY_SETTINGS:
		return SLUICE_GRPC_REFUSE_FRAME_FLOOD;
	case NGHTTP2_ERR_TOO_MANY_CONTINUATIONS:
		return SLUICE_GRPC_REFUSE_HEADER_FLOOD;
	default:
		return SLUICE_GRPC_REFUSE_PROTOCOL;
	}
}

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
		/* One small answer: the kernel takes it whole. */
		sluice_buf_append(&c->out, answer, sizeof(answer) - 1);
		if (c->io->write(c) < 0)
			return -1;
	}
	grpc_conn_close(c);
	return -1;
}

void grpc_conn_feed(grpc_conn_t *c, const uint8_t *p, size_t n)
{
	ssize_t r;

	if (c->closing || n == 0)
		return;
	if (c->preface < sizeof(PREFACE) - 1 &&
	    check_preface(c, (const char *)p, n) < 0)
		return;
	c->touch_ms = uv_now(c->g->loop);
	c->in_recv = 1;
	r = nghttp2_session_mem_recv(c->session, p, n);
	c->in_recv = 0;
	if (r < 0)
		grpc_conn_refuse(c, refusal_of(r));
	if (c->closing)
		return;
	grpc_conn_flush(c);
}
