/*
 * stream.c -- a gRPC call's request on its HTTP/2 stream: the nghttp2
 * callbacks, the method table, the sweep.
 *
 * A call is made when a stream's request HEADERS begin, checked when they
 * end (method, content-type, grpc-encoding, grpc-timeout), fed its DATA
 * (one length-prefixed message: 1 byte compressed flag, 4 bytes length),
 * and dispatched to its method when the client ends the stream.  A request
 * that goes wrong is answered through rpc.c, which the methods use too:
 * this is the one file that knows the methods.
 */
#include "grpc/internal.h"
#include "util/invariant.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { CT_NONE, CT_GRPC, CT_GRPC_OTHER, CT_OTHER };

#define METHOD_ROW(id, path, label, handle, update)                            \
	[SLUICE_GRPC_METHOD_##id] = {path, handle, update},
static const grpc_method_t methods[] = {SLUICE_GRPC_METHOD_ROWS(METHOD_ROW)};
#undef METHOD_ROW

/* The row of a path, and its index (its counters' row: the rows of
 * policy/grpc_tables.h in order, then "other"). */
static const grpc_method_t *find_method(const char *path, unsigned *ix)
{
	size_t i;

	for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (strcmp(methods[i].path, path) == 0) {
			*ix = (unsigned)i;
			return &methods[i];
		}
	return NULL;
}

static void fail(grpc_call_t *call, int status, const char *fmt, ...)
	SLUICE_PRINTF(3, 4);

static void fail(grpc_call_t *call, int status, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	grpc_call_answer_error(call, 200, status, msg, 0);
}

/* ------------------------------------------------------------- headers */

static void on_deadline(uv_timer_t *t)
{
	grpc_call_t *call = t->data;

	if (call && call->streaming)
		grpc_call_end(call, GRPC_DEADLINE_EXCEEDED,
			      "deadline (grpc-timeout) exceeded");
	else if (call)
		fail(call, GRPC_DEADLINE_EXCEEDED,
		     "deadline (grpc-timeout) exceeded");
}

/* grpc-timeout: 1 to 8 digits and a unit (H M S m u n), in ms rounded
 * up.  Returns -1 when malformed. */
static int64_t parse_timeout(const char *s)
{
	size_t n = strlen(s), i;
	uint64_t v = 0;

	if (n < 2 || n > 9)
		return -1;
	for (i = 0; i + 1 < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	switch (s[n - 1]) {
	case 'H':
		return (int64_t)(v * 3600000);
	case 'M':
		return (int64_t)(v * 60000);
	case 'S':
		return (int64_t)(v * 1000);
	case 'm':
		return (int64_t)v;
	case 'u':
		return (int64_t)((v + 999) / 1000);
	case 'n':
		return (int64_t)((v + 999999) / 1000000);
	default:
		return -1;
	}
}

static int ctype_of(const uint8_t *v, size_t n)
{
	static const char base[] = "application/grpc";
	size_t b = sizeof(base) - 1;

	if (n < b || strncasecmp((const char *)v, base, b) != 0)
		return CT_OTHER;
	if (n == b || v[b] == ';')
		return CT_GRPC;
	if (v[b] != '+')
		return CT_OTHER;
	if ((n == b + 6 || (n > b + 6 && v[b + 6] == ';')) &&
	    strncasecmp((const char *)v + b, "+proto", 6) == 0)
		return CT_GRPC;
	return CT_GRPC_OTHER;
}

static void copy_value(char *dst, size_t dstlen, const uint8_t *v, size_t n)
{
	if (n >= dstlen)
		n = dstlen - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame,
		     const uint8_t *name, size_t namelen, const uint8_t *value,
		     size_t valuelen, uint8_t flags, void *ud)
{
	grpc_call_t *call =
		nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);

	if (!call)
		return 0;
	/* As HPACK counts them (RFC 9113 6.5.2); past the cap the stream
	 * is reset. */
	call->hdr_bytes += namelen + valuelen + 32;
	if (call->hdr_bytes > GRPC_MAX_HEADER_BYTES)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	if (call->headers_done)
		return 0; /* trailers: nothing in them matters */
#define IS(lit) (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0)
	if (IS(":method")) {
		call->post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
	} else if (IS(":path")) {
		call->path_long = valuelen >= sizeof(call->path);
		copy_value(call->path, sizeof(call->path), value, valuelen);
	} else if (IS("content-type")) {
		call->ctype = ctype_of(value, valuelen);
	} else if (IS("grpc-encoding")) {
		call->has_encoding = 1;
		copy_value(call->encoding, sizeof(call->encoding), value,
			   valuelen);
	} else if (IS("grpc-timeout")) {
		call->has_timeout = 1;
		copy_value(call->timeout, sizeof(call->timeout), value,
			   valuelen > sizeof(call->timeout) - 1
				   ? sizeof(call->timeout) - 1
				   : valuelen);
		if (valuelen >= sizeof(call->timeout))
			call->timeout[0] = '\0'; /* too long: malformed */
	}
#undef IS
	return 0;
}

/* The request's HEADERS are complete: decide whether to take the call. */
static void headers_done(grpc_call_t *call)
{
	grpc_conn_t *c = call->conn;
	int64_t ms;

	call->headers_done = 1;
	if (!call->post) {
		grpc_call_answer_error(call, 405, GRPC_UNIMPLEMENTED,
				       "gRPC calls are POST requests", 0);
		return;
	}
	if (call->ctype == CT_NONE || call->ctype == CT_OTHER) {
		grpc_call_answer_error(call, 415, GRPC_UNKNOWN,
				       "content-type must be application/grpc",
				       0);
		return;
	}
	if (call->ctype == CT_GRPC_OTHER) {
		fail(call, GRPC_UNIMPLEMENTED,
		     "only application/grpc+proto messages are understood");
		return;
	}
	call->method = call->path_long
			       ? NULL
			       : find_method(call->path, &call->method_ix);
	if (!call->method) {
		fail(call, GRPC_UNIMPLEMENTED, "unknown method %.100s%s",
		     call->path, call->path_long ? "..." : "");
		return;
	}
	if (call->has_encoding && strcmp(call->encoding, "identity") != 0) {
		grpc_call_answer_error(
			call, 200, GRPC_UNIMPLEMENTED,
			"grpc-encoding: only identity is supported", 1);
		return;
	}
	if (!call->has_timeout)
		return;
	ms = parse_timeout(call->timeout);
	if (ms < 0) {
		fail(call, GRPC_INVALID_ARGUMENT,
		     "grpc-timeout is malformed; expected 1 to 8 digits and "
		     "a unit (H, M, S, m, u, n)");
		return;
	}
	if (ms == 0) {
		fail(call, GRPC_DEADLINE_EXCEEDED,
		     "deadline (grpc-timeout) exceeded");
		return;
	}
	call->timer = malloc(sizeof(*call->timer));
	if (!call->timer) {
		fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	uv_timer_init(c->g->loop, call->timer);
	call->timer->data = call;
	uv_timer_start(call->timer, on_deadline, (uint64_t)ms, 0);
}

/* ---------------------------------------------------------------- data */

/* The call of c whose request began arriving first, or NULL. */
static grpc_call_t *oldest_partial_on(grpc_conn_t *c)
{
	grpc_call_t *call, *best = NULL;

	for (call = c->calls; call; call = call->next)
		if (call->partial &&
		    (!best || call->start_ms < best->start_ms ||
		     (call->start_ms == best->start_ms && call->id < best->id)))
			best = call;
	return best;
}

/*
 * Room for len more request bytes of call, in its connection's budget
 * and the thread's.  When one is short, the request that has been
 * arriving longest (on the connection, or on the thread) is shed first
 * (answered RESOURCE_EXHAUSTED, its bytes dropped): a client that sends
 * slowly to hold the budget loses its share to those that send whole
 * messages, rather than the newcomer being refused.  Returns -1 when the
 * call itself is the oldest (nothing younger to shed).
 */
static int make_room(grpc_call_t *call, size_t len)
{
	grpc_conn_t *c = call->conn;
	sluice_grpc_t *g = c->g;

	for (;;) {
		grpc_call_t *victim;

		if (c->held + len > GRPC_CONN_BUDGET)
			victim = oldest_partial_on(c);
		else if (g->held + len > g->held_budget)
			victim = g->partial;
		else
			return 0;
		if (!victim || victim == call ||
		    (call->partial && victim->start_ms > call->start_ms))
			return -1;
		sluice_count(&g->svc->metrics->grpc_shed, 1);
		grpc_call_answer_error(
			victim, 200, GRPC_RESOURCE_EXHAUSTED,
			"request shed: its message was still arriving when "
			"the server's request budget ran short",
			0);
	}
}

static void take_data(grpc_call_t *call, const uint8_t *data, size_t len)
{
	grpc_conn_t *c = call->conn;
	size_t max = grpc_conn_max_message(c);

	if (!call->headers_done || call->answered)
		return;
	if (make_room(call, len) < 0 || grpc_call_charge(call, len, 0) < 0) {
		fail(call, GRPC_RESOURCE_EXHAUSTED,
		     "too many request bytes in flight");
		return;
	}
	grpc_call_partial(call, 1);
	sluice_buf_append(&call->in, data, len);
	if (call->in.oom) {
		/* Counted above: the release takes what arrived back. */
		grpc_call_uncharge(call, len);
		fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (!call->have_prefix && call->in.len >= GRPC_PREFIX_LEN) {
		const uint8_t *p = (const uint8_t *)call->in.data;

		call->have_prefix = 1;
		call->msg_len = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 |
				(uint32_t)p[3] << 8 | p[4];
		if (p[0] == 1) {
			fail(call, GRPC_INTERNAL,
			     "compressed message without grpc-encoding");
			return;
		}
		if (p[0] > 1) {
			fail(call, GRPC_INTERNAL,
			     "message flag %u is not 0 or 1", p[0]);
			return;
		}
		if (call->msg_len > max) {
			fail(call, GRPC_RESOURCE_EXHAUSTED,
			     "message of %u bytes is larger than the limit of "
			     "%zu (grpc.max_message_bytes)",
			     call->msg_len, max);
			return;
		}
	}
	if (call->have_prefix && call->in.len > GRPC_PREFIX_LEN + call->msg_len)
		fail(call, GRPC_INTERNAL,
		     "more than one request message for a unary method");
}

/* The client ended the stream: the request is whole, or truncated. */
static void end_stream(grpc_call_t *call)
{
	call->ended = 1;
	if (call->answered || !call->headers_done)
		return;
	if (call->in.len < GRPC_PREFIX_LEN) {
		fail(call, GRPC_INTERNAL,
		     "the stream ended without a request "
		     "message");
		return;
	}
	if (call->in.len < GRPC_PREFIX_LEN + call->msg_len) {
		fail(call, GRPC_INTERNAL,
		     "truncated message: %zu of %u bytes arrived",
		     call->in.len - GRPC_PREFIX_LEN, call->msg_len);
		return;
	}
	/* The deadline keeps running: a decision in flight past it is
	 * answered DEADLINE_EXCEEDED, and its late answer dropped. */
	/* Runs inside nghttp2_session_mem_recv (no flush, so the call
	 * outlives the method even when it answers at once). */
	SLUICE_ASSERT(call->conn->in_recv);
	call->method->handle(call,
			     (const uint8_t *)call->in.data + GRPC_PREFIX_LEN,
			     call->msg_len);
	if (call->conn)
		grpc_call_release_in(call);
}

/* ----------------------------------------------------- nghttp2 callbacks */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame,
			    void *ud)
{
	grpc_conn_t *c = ud;
	grpc_call_t *call;

	if (frame->hd.type != NGHTTP2_HEADERS ||
	    frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	call = calloc(1, sizeof(*call));
	if (!call)
		return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
	call->conn = c;
	call->g = c->g;
	call->id = frame->hd.stream_id;
	call->start_ms = uv_now(c->g->loop);
	call->start_ns = uv_hrtime();
	call->next = c->calls;
	if (c->calls)
		c->calls->prev = call;
	c->calls = call;
	nghttp2_session_set_stream_user_data(s, call->id, call);
	return 0;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame,
			 void *ud)
{
	grpc_conn_t *c = ud;
	grpc_call_t *call;

	if (frame->hd.type == NGHTTP2_RST_STREAM) {
		grpc_conn_count_reset(c);
		return 0;
	}
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return 0;
	call = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
	if (!call)
		return 0;
	if (frame->hd.type == NGHTTP2_HEADERS &&
	    frame->headers.cat == NGHTTP2_HCAT_REQUEST)
		headers_done(call);
	if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
		end_stream(call);
	return 0;
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id,
			 const uint8_t *data, size_t len, void *ud)
{
	grpc_call_t *call = nghttp2_session_get_stream_user_data(s, id);

	if (call)
		take_data(call, data, len);
	return 0;
}

/* An answer that ended our side went out: a client still sending is
 * told to stop (on_frame_send runs inside mem_send, where submitting is
 * allowed). */
static int on_frame_send(nghttp2_session *s, const nghttp2_frame *frame,
			 void *ud)
{
	grpc_call_t *call;

	if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	call = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
	if (call && call->rst_after && !call->ended) {
		call->rst_after = 0;
		nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, call->id,
					  NGHTTP2_NO_ERROR);
	}
	return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t error,
			   void *ud)
{
	grpc_call_t *call = nghttp2_session_get_stream_user_data(s, id);

	if (!call)
		return 0;
	grpc_call_detach(call);
	if (!call->hold)
		grpc_call_free(call);
	return 0;
}

void grpc_call_install(nghttp2_session_callbacks *cbs)
{
	nghttp2_session_callbacks_set_on_begin_headers_callback(
		cbs, on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cbs,
							     on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
		cbs, on_data_chunk);
	nghttp2_session_callbacks_set_on_stream_close_callback(cbs,
							       on_stream_close);
	nghttp2_session_callbacks_set_on_frame_send_callback(cbs,
							     on_frame_send);
}

/* ---------------------------------------------------------------- sweep */

void grpc_call_sweep(grpc_conn_t *c, uint64_t now, uint64_t timeout)
{
	grpc_call_t *call, *next;
	int waiting = 0;

	/* No flush while walking the list (a flush may free calls): the
	 * caller flushes after. */
	grpc_call_update_streams(c);
	c->in_recv = 1;
	for (call = c->calls; call; call = next) {
		next = call->next;
		if (call->resp_off < call->resp.len)
			waiting = 1; /* an answer the window holds back */
		if (call->answered || call->hold)
			continue; /* a decision has the store's timeout */
		/* The deadline for a message to arrive whole, from the
		 * stream's start (a slow sender is shed sooner when the
		 * budget runs short: make_room). */
		if (now - call->start_ms >= timeout)
			fail(call, GRPC_DEADLINE_EXCEEDED,
			     "the request did not arrive within the idle "
			     "timeout (http.idle_timeout_ms)");
	}
	c->in_recv = 0;
	/* A client that leaves its answers unread (a flow-control window
	 * of 0) holds them and its streams: past the idle timeout without
	 * taking a byte of them, the connection is closed. */
	if (!waiting)
		c->answer_ms = now;
	else if (now - c->answer_ms >= timeout)
		grpc_conn_close(c);
}
