/*
 * session_out.c -- what one gRPC connection's HTTP/2 session sends, and
 * how it ends: grpc_conn_flush() drains what nghttp2 has to send with
 * nghttp2_session_mem_send() into `out` and gives it to the transport
 * (grpc_io_t: conn.c's socket, or a fuzz harness's memory); GOAWAY, the
 * drain, and the cut-offs of a client that floods us (the reset bucket,
 * CVE-2023-44487).  While a write is pending or GRPC_OUT_HIGH bytes wait,
 * the session asks to read nothing more: a client that sends and never
 * reads is bounded by its socket buffers.
 *
 * Both the session (session.c) and the calls (rpc.c, stream.c) use what
 * is here; it calls neither.
 */
#include "grpc/internal.h"
#include "util/log.h"

#include <string.h>

/* ------------------------------------------------------------- limits */

/* The running config's, their defaults in the config code alone. */
unsigned grpc_conn_idle_timeout_ms(const grpc_conn_t *c)
{
	return sluice_config_idle_timeout_ms(c->g->svc->live->cfg);
}

size_t grpc_conn_max_message(const grpc_conn_t *c)
{
	return sluice_config_grpc_max_message(c->g->svc->live->cfg);
}

/* ---------------------------------------------------------- closing */

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
	c->io->close(c);
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
	if (c->io->write(c) < 0)
		return;
	if (!nghttp2_session_want_read(c->session) &&
	    !nghttp2_session_want_write(c->session) && !c->writing &&
	    c->out.len == 0) {
		grpc_conn_close(c);
		return;
	}
	c->io->read(c, !c->writing && c->out.len < GRPC_OUT_HIGH &&
			       nghttp2_session_want_read(c->session));
}

/* ------------------------------------------------------------ cut-offs */

#define REFUSAL_TEXT(id, label, text) [SLUICE_GRPC_REFUSE_##id] = text,
static const char *const refusal_text[] = {
	SLUICE_GRPC_REFUSAL_ROWS(REFUSAL_TEXT)};
#undef REFUSAL_TEXT

void grpc_conn_refuse(grpc_conn_t *c, grpc_refusal_t why)
{
	sluice_grpc_t *g = c->g;
	uint64_t now = uv_now(g->loop);
	char peer[96];

	if (c->refused || c->closing)
		return;
	c->refused = 1;
	c->goaway = 1;
	/* The GOAWAY names the last stream taken; the connection closes
	 * once it is sent (grpc_conn_flush). */
	nghttp2_session_terminate_session(c->session,
					  why == SLUICE_GRPC_REFUSE_PROTOCOL
						  ? NGHTTP2_PROTOCOL_ERROR
						  : NGHTTP2_ENHANCE_YOUR_CALM);
	sluice_count(&g->svc->metrics->grpc_refused[why], 1);
	/* A flood from many connections must not become a flood of log
	 * lines: one a second per thread, with the count left out. */
	if (g->log_ms && now - g->log_ms < 1000) {
		g->log_skipped++;
		return;
	}
	c->io->peer(c, peer, sizeof(peer));
	if (g->log_skipped)
		sluice_log_warn(
			"grpc: connection from %s cut off: %s (and %llu "
			"more cut off since the last such line)",
			peer, refusal_text[why],
			(unsigned long long)g->log_skipped);
	else
		sluice_log_warn("grpc: connection from %s cut off: %s", peer,
				refusal_text[why]);
	g->log_ms = now ? now : 1;
	g->log_skipped = 0;
}

void grpc_conn_count_reset(grpc_conn_t *c)
{
	uint64_t now = uv_now(c->g->loop);

	c->resets++;
	if (now > c->reset_ms) {
		c->reset_tokens +=
			(double)(now - c->reset_ms) * GRPC_RESET_RATE / 1000.0;
		if (c->reset_tokens > GRPC_RESET_BURST)
			c->reset_tokens = GRPC_RESET_BURST;
		c->reset_ms = now;
	}
	if (c->reset_tokens < 1 || c->resets > GRPC_RESET_TOTAL) {
		grpc_conn_refuse(c, SLUICE_GRPC_REFUSE_RESET_FLOOD);
		return;
	}
	c->reset_tokens -= 1;
}
