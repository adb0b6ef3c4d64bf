/*
 * rpc.c -- gRPC calls on HTTP/2 streams (the nghttp2 callbacks).
 *
 * A call is made when a stream's request HEADERS begin, checked when they
 * end (method, content-type, grpc-encoding, grpc-timeout), fed its DATA
 * (one length-prefixed message: 1 byte compressed flag, 4 bytes length),
 * and dispatched to its method when the client ends the stream.  Errors
 * found before an answer was started go out "trailers-only": one HEADERS
 * frame with :status, grpc-status and grpc-message that ends the stream;
 * when the client is still sending, RST_STREAM(NO_ERROR) then tells it to
 * stop (RFC 9113 8.1).
 *
 * Lifetime: a call lives while its stream is open, or while its method
 * holds it (a decision in flight).  Whichever ends last frees it; a
 * call whose stream went first is "detached" (conn NULL) and its answer
 * is dropped.
 */
#include "grpc/internal.h"
#include "util/log.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_LEN 5

struct grpc_call_s {
	grpc_conn_t *conn; /* NULL once detached */
	grpc_call_t *prev, *next;
	int32_t id;
	const grpc_method_t *method;
	sluice_buf_t in;   /* request bytes: prefix and message */
	sluice_buf_t resp; /* the answer's DATA: prefix and message */
	size_t resp_off;
	uv_timer_t *timer; /* grpc-timeout */
	uint64_t start_ms;
	size_t hdr_bytes;
	uint32_t msg_len; /* from the prefix */
	char path[128];
	char encoding[32];
	char timeout[16];
	int ctype; /* CT_* */
	unsigned post : 1;
	unsigned path_long : 1;
	unsigned has_encoding : 1;
	unsigned has_timeout : 1;
	unsigned have_prefix : 1;
	unsigned headers_done : 1;
	unsigned ended : 1;	 /* the client ended the stream */
	unsigned answered : 1;	 /* an answer was submitted */
	unsigned hold : 1;	 /* the method answers later */
	unsigned rst_after : 1;	 /* RST_STREAM once the answer is sent */
	unsigned streaming : 1;	 /* headers sent, messages follow */
	unsigned stream_end : 1; /* trailers follow the messages */
	int end_status;
	char end_msg[128];
	int tag; /* the streaming method's */
};

enum { CT_NONE, CT_GRPC, CT_GRPC_OTHER, CT_OTHER };

static const grpc_method_t methods[] = {
	{"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
	 grpc_rls_should_rate_limit, NULL},
	{"/grpc.health.v1.Health/Check", grpc_health_check, NULL},
	{"/grpc.health.v1.Health/Watch", grpc_health_watch,
	 grpc_health_watch_update},
};

static const grpc_method_t *find_method(const char *path)
{
	size_t i;

	for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (strcmp(methods[i].path, path) == 0)
			return &methods[i];
	return NULL;
}

/* ------------------------------------------------------------ lifetime */

static void free_handle(uv_handle_t *h)
{
	free(h);
}

/* Drops the request bytes and their share of the budgets. */
static void release_in(grpc_call_t *call)
{
	if (call->conn) {
		assert(call->conn->held >= call->in.len);
		call->conn->held -= call->in.len;
		call->conn->g->held -= call->in.len;
	}
	sluice_buf_free(&call->in);
}

static void call_free(grpc_call_t *call)
{
	assert(!call->conn && !call->hold);
	sluice_buf_free(&call->in);
	sluice_buf_free(&call->resp);
	if (call->timer) {
		uv_timer_stop(call->timer);
		call->timer->data = NULL;
		uv_close((uv_handle_t *)call->timer, free_handle);
	}
	free(call);
}

static void detach(grpc_call_t *call)
{
	grpc_conn_t *c = call->conn;

	if (!c)
		return;
	release_in(call);
	if (call->prev)
		call->prev->next = call->next;
	else
		c->calls = call->next;
	if (call->next)
		call->next->prev = call->prev;
	call->prev = call->next = NULL;
	nghttp2_session_set_stream_user_data(c->session, call->id, NULL);
	call->conn = NULL;
}

void grpc_call_detach_all(grpc_conn_t *c)
{
	while (c->calls) {
		grpc_call_t *call = c->calls;

		detach(call);
		if (!call->hold)
			call_free(call);
	}
}

sluice_svc_t *grpc_call_svc(const grpc_call_t *call)
{
	return call->conn->g->svc;
}

void grpc_call_hold(grpc_call_t *call)
{
	call->hold = 1;
}

/* ------------------------------------------------------------- answers */

#define NV(n, v, vlen)                                                         \
	{                                                                      \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vlen),         \
			NGHTTP2_NV_FLAG_NONE                                   \
	}

/* grpc-message is percent-encoded: bytes outside printable ASCII, and
 * '%' itself. */
static size_t pct_encode(char *out, size_t outlen, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = 0;

	for (; *s && n + 4 < outlen; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch < 0x20 || ch > 0x7e || ch == '%') {
			out[n++] = '%';
			out[n++] = hex[ch >> 4];
			out[n++] = hex[ch & 15];
		} else {
			out[n++] = (char)ch;
		}
	}
	out[n] = '\0';
	return n;
}

/* Counts an answer for /metrics: by method (the table's order, then
 * "other") and grpc-status. */
static void count_answer(grpc_call_t *call, int status)
{
	size_t m = call->method ? (size_t)(call->method - methods)
				: SLUICE_GRPC_METHODS - 1;

	if (m >= SLUICE_GRPC_METHODS)
		m = SLUICE_GRPC_METHODS - 1;
	if (status < 0 || status > 16)
		status = GRPC_UNKNOWN;
	sluice_count(&call->conn->g->svc->metrics->grpc_calls[m][status], 1);
}

/* After an answer: flush now unless nghttp2 is calling us (then
 * on_read flushes when mem_recv returns). */
static void after_answer(grpc_conn_t *c)
{
	if (!c->in_recv)
		grpc_conn_flush(c);
}

/* The answer to a call that failed before anything was sent: HEADERS
 * only, ending the stream.  http is the :status (200 for gRPC errors). */
static void answer_error(grpc_call_t *call, int http, int status,
			 const char *msg, int accept_identity)
{
	grpc_conn_t *c = call->conn;
	char st[16], code[16], emsg[512];
	nghttp2_nv nv[6];
	size_t n = 0;

	if (!c || call->answered)
		return;
	call->answered = 1;
	count_answer(call, status);
	snprintf(st, sizeof(st), "%d", http);
	snprintf(code, sizeof(code), "%d", status);
	nv[n++] = (nghttp2_nv)NV(":status", st, strlen(st));
	nv[n++] = (nghttp2_nv)NV("content-type", "application/grpc", 16);
	nv[n++] = (nghttp2_nv)NV("grpc-status", code, strlen(code));
	nv[n++] = (nghttp2_nv)NV("grpc-message", emsg,
				 pct_encode(emsg, sizeof(emsg), msg));
	if (accept_identity)
		nv[n++] = (nghttp2_nv)NV("grpc-accept-encoding", "identity", 8);
	if (http == 405)
		nv[n++] = (nghttp2_nv)NV("allow", "POST", 4);
	nghttp2_submit_response(c->session, call->id, nv, n, NULL);
	/* The client is still sending: once the answer is out (not
	 * before: the reset would discard it), tell it to stop. */
	call->rst_after = !call->ended;
	release_in(call);
	after_answer(c);
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
	answer_error(call, 200, status, msg, 0);
}

/* The method's answer ends its hold; a detached call is freed. */
static int end_hold(grpc_call_t *call)
{
	call->hold = 0;
	if (call->conn)
		return 0;
	call_free(call);
	return -1;
}

void grpc_call_fail(grpc_call_t *call, int status, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (end_hold(call) < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	answer_error(call, 200, status, msg, 0);
}

static ssize_t read_resp(nghttp2_session *s, int32_t id, uint8_t *buf,
			 size_t len, uint32_t *flags, nghttp2_data_source *src,
			 void *ud)
{
	grpc_call_t *call = src->ptr;
	size_t n = call->resp.len - call->resp_off;

	if (n > len)
		n = len;
	memcpy(buf, call->resp.data + call->resp_off, n);
	call->resp_off += n;
	if (call->resp_off == call->resp.len) {
		nghttp2_nv tr[] = {NV("grpc-status", "0", 1)};

		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (nghttp2_submit_trailer(s, id, tr, 1) == 0)
			*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
	}
	return (ssize_t)n;
}

void grpc_call_reply(grpc_call_t *call, const ProtobufCMessage *msg)
{
	nghttp2_nv nv[] = {
		NV(":status", "200", 3),
		NV("content-type", "application/grpc", 16),
		NV("grpc-accept-encoding", "identity", 8),
	};
	nghttp2_data_provider prd;
	size_t len;
	grpc_conn_t *c;

	if (end_hold(call) < 0)
		return;
	c = call->conn;
	if (call->answered)
		return;
	len = protobuf_c_message_get_packed_size(msg);
	if (sluice_buf_reserve(&call->resp, PREFIX_LEN + len) < 0) {
		answer_error(call, 200, GRPC_RESOURCE_EXHAUSTED,
			     "out of memory", 0);
		return;
	}
	call->resp.data[0] = 0;
	call->resp.data[1] = (char)(len >> 24);
	call->resp.data[2] = (char)(len >> 16);
	call->resp.data[3] = (char)(len >> 8);
	call->resp.data[4] = (char)len;
	protobuf_c_message_pack(msg, (uint8_t *)call->resp.data + PREFIX_LEN);
	call->resp.len = PREFIX_LEN + len;
	call->answered = 1;
	count_answer(call, GRPC_OK);
	prd.source.ptr = call;
	prd.read_callback = read_resp;
	if (nghttp2_submit_response(c->session, call->id, nv,
				    sizeof(nv) / sizeof(nv[0]), &prd) != 0)
		nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE,
					  call->id, NGHTTP2_INTERNAL_ERROR);
	after_answer(c);
}

/* ------------------------------------------------- streaming answers */

int grpc_call_tag(const grpc_call_t *call)
{
	return call->tag;
}

void grpc_call_set_tag(grpc_call_t *call, int tag)
{
	call->tag = tag;
}

/* The messages of a streaming call as the stream can take them; with
 * none waiting, the stream is deferred until grpc_call_send() or
 * grpc_call_end() resumes it. */
static ssize_t read_stream(nghttp2_session *s, int32_t id, uint8_t *buf,
			   size_t len, uint32_t *flags,
			   nghttp2_data_source *src, void *ud)
{
	grpc_call_t *call = src->ptr;
	size_t n = call->resp.len - call->resp_off;

	if (n == 0 && !call->stream_end)
		return NGHTTP2_ERR_DEFERRED;
	if (n > len)
		n = len;
	memcpy(buf, call->resp.data + call->resp_off, n);
	call->resp_off += n;
	if (call->resp_off == call->resp.len && call->stream_end) {
		char code[16], emsg[512];
		nghttp2_nv tr[2];

		snprintf(code, sizeof(code), "%d", call->end_status);
		tr[0] = (nghttp2_nv)NV("grpc-status", code, strlen(code));
		tr[1] = (nghttp2_nv)NV(
			"grpc-message", emsg,
			pct_encode(emsg, sizeof(emsg), call->end_msg));
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (nghttp2_submit_trailer(s, id, tr,
					   call->end_msg[0] ? 2 : 1) == 0)
			*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
	}
	return (ssize_t)n;
}

void grpc_call_send(grpc_call_t *call, const ProtobufCMessage *msg)
{
	nghttp2_nv nv[] = {
		NV(":status", "200", 3),
		NV("content-type", "application/grpc", 16),
		NV("grpc-accept-encoding", "identity", 8),
	};
	grpc_conn_t *c = call->conn;
	nghttp2_data_provider prd;
	size_t len;
	uint8_t *p;

	if (!c || call->stream_end || (call->answered && !call->streaming))
		return;
	/* What was sent is dropped; what waits stays (a status message is
	 * a few bytes, and one goes at most every sweep). */
	sluice_buf_consume(&call->resp, call->resp_off);
	call->resp_off = 0;
	len = protobuf_c_message_get_packed_size(msg);
	if (sluice_buf_reserve(&call->resp, PREFIX_LEN + len) < 0) {
		grpc_call_end(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	p = (uint8_t *)call->resp.data + call->resp.len;
	p[0] = 0;
	p[1] = (uint8_t)(len >> 24);
	p[2] = (uint8_t)(len >> 16);
	p[3] = (uint8_t)(len >> 8);
	p[4] = (uint8_t)len;
	protobuf_c_message_pack(msg, p + PREFIX_LEN);
	call->resp.len += PREFIX_LEN + len;
	if (call->streaming) {
		nghttp2_session_resume_data(c->session, call->id);
	} else {
		call->streaming = 1;
		call->answered = 1;
		prd.source.ptr = call;
		prd.read_callback = read_stream;
		if (nghttp2_submit_response(c->session, call->id, nv,
					    sizeof(nv) / sizeof(nv[0]),
					    &prd) != 0)
			nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE,
						  call->id,
						  NGHTTP2_INTERNAL_ERROR);
	}
	after_answer(c);
}

void grpc_call_end(grpc_call_t *call, int status, const char *msg)
{
	grpc_conn_t *c = call->conn;

	if (!c || call->stream_end)
		return;
	if (!call->streaming) {
		answer_error(call, 200, status, msg, 0);
		return;
	}
	call->stream_end = 1;
	call->end_status = status;
	snprintf(call->end_msg, sizeof(call->end_msg), "%s", msg ? msg : "");
	count_answer(call, status);
	nghttp2_session_resume_data(c->session, call->id);
	after_answer(c);
}

void grpc_call_update_streams(grpc_conn_t *c)
{
	grpc_call_t *call, *next;
	unsigned was = c->in_recv;

	/* No flush while walking the list (a flush may free calls). */
	c->in_recv = 1;
	for (call = c->calls; call; call = next) {
		next = call->next;
		if (call->streaming && !call->stream_end &&
		    call->method->update)
			call->method->update(call);
	}
	c->in_recv = was;
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
		answer_error(call, 405, GRPC_UNIMPLEMENTED,
			     "gRPC calls are POST requests", 0);
		return;
	}
	if (call->ctype == CT_NONE || call->ctype == CT_OTHER) {
		answer_error(call, 415, GRPC_UNKNOWN,
			     "content-type must be application/grpc", 0);
		return;
	}
	if (call->ctype == CT_GRPC_OTHER) {
		fail(call, GRPC_UNIMPLEMENTED,
		     "only application/grpc+proto messages are understood");
		return;
	}
	call->method = call->path_long ? NULL : find_method(call->path);
	if (!call->method) {
		fail(call, GRPC_UNIMPLEMENTED, "unknown method %.100s%s",
		     call->path, call->path_long ? "..." : "");
		return;
	}
	if (call->has_encoding && strcmp(call->encoding, "identity") != 0) {
		answer_error(call, 200, GRPC_UNIMPLEMENTED,
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

static void take_data(grpc_call_t *call, const uint8_t *data, size_t len)
{
	grpc_conn_t *c = call->conn;
	size_t max = grpc_conn_max_message(c);

	if (!call->headers_done || call->answered)
		return;
	if (c->held + len > GRPC_CONN_BUDGET ||
	    c->g->held + len > c->g->held_budget) {
		fail(call, GRPC_RESOURCE_EXHAUSTED,
		     "too many request bytes in flight");
		return;
	}
	sluice_buf_append(&call->in, data, len);
	if (call->in.oom) {
		fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	c->held += len;
	c->g->held += len;
	if (!call->have_prefix && call->in.len >= PREFIX_LEN) {
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
	if (call->have_prefix && call->in.len > PREFIX_LEN + call->msg_len)
		fail(call, GRPC_INTERNAL,
		     "more than one request message for a unary method");
}

/* The client ended the stream: the request is whole, or truncated. */
static void end_stream(grpc_call_t *call)
{
	call->ended = 1;
	if (call->answered || !call->headers_done)
		return;
	if (call->in.len < PREFIX_LEN) {
		fail(call, GRPC_INTERNAL,
		     "the stream ended without a request "
		     "message");
		return;
	}
	if (call->in.len < PREFIX_LEN + call->msg_len) {
		fail(call, GRPC_INTERNAL,
		     "truncated message: %zu of %u bytes arrived",
		     call->in.len - PREFIX_LEN, call->msg_len);
		return;
	}
	/* The deadline keeps running: a decision in flight past it is
	 * answered DEADLINE_EXCEEDED, and its late answer dropped. */
	/* Runs inside nghttp2_session_mem_recv (no flush, so the call
	 * outlives the method even when it answers at once). */
	assert(call->conn->in_recv);
	call->method->handle(call, (const uint8_t *)call->in.data + PREFIX_LEN,
			     call->msg_len);
	if (call->conn)
		release_in(call);
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
	call->id = frame->hd.stream_id;
	call->start_ms = uv_now(c->g->loop);
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
	detach(call);
	if (!call->hold)
		call_free(call);
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

	/* No flush while walking the list (a flush may free calls): the
	 * caller flushes after. */
	grpc_call_update_streams(c);
	c->in_recv = 1;
	for (call = c->calls; call; call = next) {
		next = call->next;
		if (call->answered || call->hold)
			continue; /* a decision has the store's timeout */
		if (now - call->start_ms >= timeout)
			fail(call, GRPC_DEADLINE_EXCEEDED,
			     "the request did not arrive within the idle "
			     "timeout (http.idle_timeout_ms)");
	}
	c->in_recv = 0;
}
