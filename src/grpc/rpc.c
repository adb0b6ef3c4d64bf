/*
 * rpc.c -- a gRPC call's life and its answers: what a method (rls.c,
 * health.c) calls, and what stream.c calls when a request goes wrong.
 *
 * Errors found before an answer was started go out "trailers-only": one
 * HEADERS frame with :status, grpc-status and grpc-message that ends the
 * stream; when the client is still sending, RST_STREAM(NO_ERROR) then
 * tells it to stop (RFC 9113 8.1).
 *
 * Lifetime: a call lives while its stream is open, or while its method
 * holds it (a decision in flight).  Whichever ends last frees it; a
 * call whose stream went first is "detached" (conn NULL) and its answer
 * is dropped.
 */
#include "grpc/internal.h"
#include "util/invariant.h"
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ lifetime */

static void free_handle(uv_handle_t *h)
{
	free(h);
}

/* ------------------------------------------------------------- budgets */

int grpc_call_charge(grpc_call_t *call, size_t n, int force)
{
	grpc_conn_t *c = call->conn;

	if (!force && ((c && c->held + n > GRPC_CONN_BUDGET) ||
		       call->g->held + n > call->g->held_budget))
		return -1;
	call->charge += n;
	call->g->held += n;
	if (c)
		c->held += n;
	return 0;
}

void grpc_call_uncharge(grpc_call_t *call, size_t n)
{
	SLUICE_ASSERT(call->charge >= n && call->g->held >= n);
	call->charge -= n;
	call->g->held -= n;
	if (call->conn) {
		SLUICE_ASSERT(call->conn->held >= n);
		call->conn->held -= n;
	}
}

void grpc_call_partial(grpc_call_t *call, int on)
{
	sluice_grpc_t *g = call->g;

	if (on == (int)call->partial)
		return;
	if (on) {
		call->pprev = g->partial_tail;
		call->pnext = NULL;
		if (g->partial_tail)
			g->partial_tail->pnext = call;
		else
			g->partial = call;
		g->partial_tail = call;
	} else {
		if (call->pprev)
			call->pprev->pnext = call->pnext;
		else
			g->partial = call->pnext;
		if (call->pnext)
			call->pnext->pprev = call->pprev;
		else
			g->partial_tail = call->pprev;
		call->pprev = call->pnext = NULL;
	}
	call->partial = (unsigned)on;
}

/* Drops the request bytes and their share of the budgets. */
void grpc_call_release_in(grpc_call_t *call)
{
	grpc_call_partial(call, 0);
	grpc_call_uncharge(call, call->in.len);
	sluice_buf_free(&call->in);
}

void grpc_call_free(grpc_call_t *call)
{
	SLUICE_ASSERT(!call->conn && !call->hold);
	grpc_call_partial(call, 0);
	grpc_call_uncharge(call, call->charge);
	sluice_buf_free(&call->in);
	sluice_buf_free(&call->resp);
	if (call->timer) {
		uv_timer_stop(call->timer);
		call->timer->data = NULL;
		uv_close((uv_handle_t *)call->timer, free_handle);
	}
	free(call);
}

void grpc_call_detach(grpc_call_t *call)
{
	grpc_conn_t *c = call->conn;

	if (!c)
		return;
	grpc_call_release_in(call);
	/* What the call still holds (a decision in flight) stays counted
	 * in the thread's budget until it is freed; the connection's
	 * share ends here. */
	SLUICE_ASSERT(c->held >= call->charge);
	c->held -= call->charge;
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

		grpc_call_detach(call);
		if (!call->hold)
			grpc_call_free(call);
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
 * "other") and grpc-status, and its time since the request's headers. */
static void count_answer(grpc_call_t *call, int status)
{
	sluice_metrics_t *mx = call->conn->g->svc->metrics;
	size_t m = call->method ? call->method_ix : SLUICE_GRPC_METHOD_OTHER;
	uint64_t now = uv_hrtime();

	if (m >= SLUICE_GRPC_METHODS)
		m = SLUICE_GRPC_METHOD_OTHER;
	if (status < 0 || status > 16)
		status = GRPC_UNKNOWN;
	sluice_count(&mx->grpc_calls[m][status], 1);
	sluice_latency_count(mx->grpc_latency[m], &mx->grpc_latency_sum_ns[m],
			     now > call->start_ns ? now - call->start_ns : 0);
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
void grpc_call_answer_error(grpc_call_t *call, int http, int status,
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
	grpc_call_release_in(call);
	grpc_call_uncharge(call, call->charge); /* a decision's request */
	after_answer(c);
}

/* The method's answer ends its hold; a detached call is freed. */
static int end_hold(grpc_call_t *call)
{
	call->hold = 0;
	if (call->conn)
		return 0;
	grpc_call_free(call);
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
	grpc_call_answer_error(call, 200, status, msg, 0);
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
	if (n && call->conn)
		call->conn->answer_ms = uv_now(call->g->loop);
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
	if (sluice_buf_reserve(&call->resp, GRPC_PREFIX_LEN + len) < 0) {
		grpc_call_answer_error(call, 200, GRPC_RESOURCE_EXHAUSTED,
				       "out of memory", 0);
		return;
	}
	call->resp.data[0] = 0;
	call->resp.data[1] = (char)(len >> 24);
	call->resp.data[2] = (char)(len >> 16);
	call->resp.data[3] = (char)(len >> 8);
	call->resp.data[4] = (char)len;
	protobuf_c_message_pack(msg,
				(uint8_t *)call->resp.data + GRPC_PREFIX_LEN);
	call->resp.len = GRPC_PREFIX_LEN + len;
	/* The decision's request goes; the answer is counted until it is
	 * sent (a client that never reads holds it). */
	grpc_call_uncharge(call, call->charge - call->in.len);
	grpc_call_charge(call, call->resp.len, 1);
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
	if (n && call->conn)
		call->conn->answer_ms = uv_now(call->g->loop);
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
	grpc_call_uncharge(call, call->resp_off);
	sluice_buf_consume(&call->resp, call->resp_off);
	call->resp_off = 0;
	len = protobuf_c_message_get_packed_size(msg);
	if (sluice_buf_reserve(&call->resp, GRPC_PREFIX_LEN + len) < 0) {
		grpc_call_end(call, GRPC_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	p = (uint8_t *)call->resp.data + call->resp.len;
	p[0] = 0;
	p[1] = (uint8_t)(len >> 24);
	p[2] = (uint8_t)(len >> 16);
	p[3] = (uint8_t)(len >> 8);
	p[4] = (uint8_t)len;
	protobuf_c_message_pack(msg, p + GRPC_PREFIX_LEN);
	call->resp.len += GRPC_PREFIX_LEN + len;
	grpc_call_charge(call, GRPC_PREFIX_LEN + len, 1);
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
		grpc_call_answer_error(call, 200, status, msg, 0);
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
