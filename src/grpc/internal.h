/*
 * internal.h -- shared by the files of the gRPC front end:
 *
 *   listen.c   listening sockets (TCP or Unix), accepting
 *   conn.c     one HTTP/2 connection: bytes in and out, nghttp2, limits,
 *              timeouts, GOAWAY
 *   call.c     one gRPC call on a stream: headers checked, the 5-byte
 *              message prefix, deadlines, answers and trailers; the
 *              method table
 *   rls.c      ShouldRateLimit: protobuf-c <-> the RLS engine
 *   health.c   grpc.health.v1.Health/Check
 */
#ifndef SLUICE_GRPC_INTERNAL_H
#define SLUICE_GRPC_INTERNAL_H

#include "grpc/grpc.h"
#include "util/buf.h"

#include <nghttp2/nghttp2.h>
#include <protobuf-c/protobuf-c.h>

/* gRPC status codes (grpc/doc/statuscodes.md). */
enum {
	GRPC_OK = 0,
	GRPC_CANCELLED = 1,
	GRPC_UNKNOWN = 2,
	GRPC_INVALID_ARGUMENT = 3,
	GRPC_DEADLINE_EXCEEDED = 4,
	GRPC_NOT_FOUND = 5,
	GRPC_RESOURCE_EXHAUSTED = 8,
	GRPC_UNIMPLEMENTED = 12,
	GRPC_INTERNAL = 13,
	GRPC_UNAVAILABLE = 14,
};

/* Streams one connection may have open at once (SETTINGS). */
#define GRPC_MAX_STREAMS 100
/* Request bytes one connection's calls may buffer together, and header
 * bytes one stream may send. */
#define GRPC_CONN_BUDGET      (1024 * 1024)
#define GRPC_MAX_HEADER_BYTES (16 * 1024)
/* Unsent answer bytes past which a connection reads no further. */
#define GRPC_OUT_HIGH (64 * 1024)
/* Streams a client may reset: nghttp2's token bucket (a burst, then so
 * many a second; past it GOAWAY), and in all on one connection.  Envoy
 * resets the calls its timeout (20 ms by default) gives up on, so a slow
 * store makes an honest client reset many: the bucket is sized for that,
 * while a rapid-reset flood (thousands a second) is cut off within a
 * second or so. */
#define GRPC_RESET_BURST 1000
#define GRPC_RESET_RATE	 100
#define GRPC_RESET_TOTAL 10000

typedef struct grpc_conn_s grpc_conn_t;
typedef struct grpc_call_s grpc_call_t;

/* One row of the method table (call.c): an RPC is one row and one
 * function. */
typedef struct grpc_method_s {
	const char *path; /* "/package.Service/Method" */
	/* The request message arrived whole: answer it with
	 * grpc_call_reply() or grpc_call_fail(), now or later (after
	 * grpc_call_hold()).  msg is valid until the call is answered. */
	void (*handle)(grpc_call_t *call, const uint8_t *msg, size_t len);
} grpc_method_t;

struct sluice_grpc_s {
	uv_loop_t *loop;
	sluice_svc_t *svc;
	union {
		uv_tcp_t tcp;
		uv_pipe_t pipe;
		uv_handle_t handle;
		uv_stream_t stream;
	} listener;
	int is_unix;
	int listening;
	int draining;
	grpc_conn_t *conns; /* list (conn.c) */
	size_t nconns;
	size_t held, held_budget; /* request bytes all connections buffer */
	char rbuf[16 * 1024];	  /* read buffer shared by the connections */
};

struct grpc_conn_s {
	sluice_grpc_t *g;
	union {
		uv_tcp_t tcp;
		uv_pipe_t pipe;
		uv_handle_t handle;
		uv_stream_t stream;
	} h;
	nghttp2_session *session;
	uv_write_t wreq;
	sluice_buf_t out;   /* frames not yet handed to the kernel */
	sluice_buf_t wbuf;  /* frames in a uv_write */
	grpc_call_t *calls; /* calls on open streams */
	grpc_conn_t *prev, *next;
	uint64_t touch_ms; /* last frame in or out */
	size_t held;	   /* request bytes this connection's calls buffer */
	size_t preface;	   /* bytes of the client preface checked so far */
	uint64_t resets;   /* streams the client reset */
	unsigned writing : 1;
	unsigned reading : 1;
	unsigned closing : 1;
	unsigned in_recv : 1; /* in mem_recv or a sweep: flush after */
	unsigned goaway : 1;  /* GOAWAY submitted: close when done */
	unsigned notice : 1;  /* draining: the final GOAWAY follows the
				 last call in flight */
};

/* listen.c -> conn.c */
void grpc_conn_accept(sluice_grpc_t *g);
/* Writes what nghttp2 has to send, then reads on or closes. */
void grpc_conn_flush(grpc_conn_t *c);
void grpc_conn_close(grpc_conn_t *c);
void grpc_conn_goaway(grpc_conn_t *c, uint32_t error, const char *why);
/* SIGTERM: GOAWAY now when no call is in flight; else a shutdown notice
 * now and the GOAWAY after the last call (grpc_conn_flush). */
void grpc_conn_drain(grpc_conn_t *c);
unsigned grpc_conn_idle_timeout_ms(const grpc_conn_t *c);
size_t grpc_conn_max_message(const grpc_conn_t *c);

/* call.c: nghttp2 callbacks and stream bookkeeping for conn.c */
void grpc_call_install(nghttp2_session_callbacks *cbs);
/* The connection is going: calls in flight finish without it. */
void grpc_call_detach_all(grpc_conn_t *c);
/* Streams whose request has not arrived within the idle timeout. */
void grpc_call_sweep(grpc_conn_t *c, uint64_t now, uint64_t timeout);

/* call.c: for the methods */
sluice_svc_t *grpc_call_svc(const grpc_call_t *call);
/* The answer will come later (an asynchronous decision): the call stays
 * until grpc_call_reply()/grpc_call_fail(), even if its stream goes. */
void grpc_call_hold(grpc_call_t *call);
/* Answers with one message (packed here) and grpc-status 0; or with an
 * error status and message (trailers-only when nothing was sent yet).
 * After either the method must not touch call again. */
void grpc_call_reply(grpc_call_t *call, const ProtobufCMessage *msg);
void grpc_call_fail(grpc_call_t *call, int status, const char *fmt, ...)
	SLUICE_PRINTF(3, 4);

/* The methods (rls.c, health.c). */
void grpc_rls_should_rate_limit(grpc_call_t *call, const uint8_t *msg,
				size_t len);
void grpc_health_check(grpc_call_t *call, const uint8_t *msg, size_t len);

#endif /* SLUICE_GRPC_INTERNAL_H */
