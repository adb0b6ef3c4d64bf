/*
 * internal.h -- shared by the files of the gRPC front end:
 *
 *   listen.c   listening sockets (TCP or Unix), accepting
 *   conn.c     one connection's socket: reading, writing, closing
 *   session.c  one connection's HTTP/2 session: started, bytes in
 *              (nghttp2): no socket, so a fuzz harness drives it from
 *              memory
 *   session_out.c  bytes out, GOAWAY, the drain, floods cut off
 *   stream.c   a call's request on its stream: the nghttp2 callbacks,
 *              headers checked, the 5-byte message prefix, deadlines;
 *              the method table
 *   rpc.c      a call's life and its answers and trailers (what the
 *              methods call)
 *   rls.c      ShouldRateLimit: protobuf-c <-> the RLS engine
 *   health.c   grpc.health.v1.Health/Check and Watch
 *   wire.c     string fields found on the wire (NULs protobuf-c hides)
 */
#ifndef SLUICE_GRPC_INTERNAL_H
#define SLUICE_GRPC_INTERNAL_H

#include "grpc/grpc.h"
#include "policy/grpc_tables.h"
#include "util/buf.h"
#include "util/tls_server.h"

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

/* Why a connection is cut off: SLUICE_GRPC_REFUSE_* of
 * policy/grpc_tables.h, whose row also gives its metric label and the
 * log's words. */
typedef unsigned grpc_refusal_t;

typedef struct grpc_conn_s grpc_conn_t;
typedef struct grpc_call_s grpc_call_t;

/* What carries a connection's bytes (conn.c: a socket). */
typedef struct grpc_io_s {
	/* Takes c->out (what it cannot take at once it keeps, setting
	 * c->writing until done, then calls grpc_conn_flush).  Returns -1
	 * when the connection closed. */
	int (*write)(grpc_conn_t *c);
	/* Reads on (grpc_conn_feed with what arrives) or not. */
	void (*read)(grpc_conn_t *c, int on);
	/* grpc_conn_close() is done with c: calls grpc_conn_release(c)
	 * later, when no callback of c's is on the stack, then frees it. */
	void (*close)(grpc_conn_t *c);
	/* The client's address, for the log. */
	void (*peer)(grpc_conn_t *c, char *out, size_t len);
} grpc_io_t;

/* One row of the method table (stream.c): an RPC is one row and one
 * function. */
typedef struct grpc_method_s {
	const char *path; /* "/package.Service/Method" */
	/* The request message arrived whole: answer it with
	 * grpc_call_reply() or grpc_call_fail(), now or later (after
	 * grpc_call_hold()).  msg is valid until the call is answered. */
	void (*handle)(grpc_call_t *call, const uint8_t *msg, size_t len);
	/* A server-streaming method: called for each of its calls still
	 * streaming at every sweep and at the drain, to send what changed
	 * (grpc_call_send) or end the call (grpc_call_end).  NULL for a
	 * unary method. */
	void (*update)(grpc_call_t *call);
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
	/* Bytes the calls of all connections hold (requests arriving,
	 * unpacked requests being decided, answers not yet sent), and the
	 * bound; a detached call's stay counted until it is freed. */
	size_t held, held_budget;
	/* Calls whose request message is arriving, oldest first: shed
	 * from the front when the budget is short (take_data). */
	grpc_call_t *partial, *partial_tail;
	uint64_t log_ms;      /* last cut-off logged (one a second) */
	uint64_t log_skipped; /* cut-offs not logged since */
	char rbuf[16 * 1024]; /* read buffer shared by the connections */
};

/* ------------------------------------------------------------ tls.c */

/* Each sluice_grpc_t holds the process's grpc.tls context source while
 * it lives (util/tls_server.h): hold at its start, release at its end. */
void grpc_tls_hold(void);
/* TLS for a new connection (grpc.tls on): 0, or -1 (no context). */
int grpc_tls_start(grpc_conn_t *c);
/* The socket's bytes in: the handshake, then the plaintext to
 * grpc_conn_feed(); records to send land in c->cipher.  -1: close. */
int grpc_tls_in(grpc_conn_t *c, const uint8_t *p, size_t n);
/* c->out encrypted into c->cipher.  -1: close. */
int grpc_tls_out(grpc_conn_t *c);
void grpc_tls_free(grpc_conn_t *c);
/* The thread's context, at the listener's end. */
void grpc_tls_release(sluice_grpc_t *g);

struct grpc_conn_s {
	sluice_grpc_t *g;
	const grpc_io_t *io;
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
	uint64_t born_ms;  /* accepted */
	/* grpc.max_connection_age_ms, jittered, and its grace, as the
	 * config was when accepted; 0: no age */
	uint64_t age_ms, age_grace_ms;
	uint64_t aged_ms;    /* when it was told GOAWAY for its age */
	uint64_t answer_ms;  /* last sweep with no answer waiting on the
				client's window, or last answer bytes out */
	size_t held;	     /* bytes this connection's calls hold */
	size_t preface;	     /* bytes of the client preface checked so far */
	uint64_t resets;     /* streams the client reset */
	double reset_tokens; /* the reset bucket: GRPC_RESET_BURST at most */
	uint64_t reset_ms;   /* when it was last refilled */
	unsigned writing : 1;
	unsigned reading : 1;
	unsigned closing : 1;
	unsigned in_recv : 1;  /* in mem_recv or a sweep: flush after */
	unsigned goaway : 1;   /* GOAWAY submitted: close when done */
	unsigned notice : 1;   /* draining: the final GOAWAY follows the
				  last call in flight */
	unsigned refused : 1;  /* cut off (grpc_conn_refuse) */
	unsigned aged : 1;     /* past max_connection_age: draining */
	sluice_tls_conn_t tls; /* TLS (tls.c); tls.ssl NULL: cleartext */
};

/* listen.c -> conn.c */
void grpc_conn_accept(sluice_grpc_t *g);

/* session.c, for a transport: c (zeroed but for the transport's own
 * fields) joins g and its session starts (it reads on); -1 when it
 * could not (c is closed then).  grpc_conn_feed() takes bytes read;
 * grpc_conn_release() frees what the session holds (not c). */
int grpc_conn_start(sluice_grpc_t *g, grpc_conn_t *c, const grpc_io_t *io);
void grpc_conn_feed(grpc_conn_t *c, const uint8_t *p, size_t n);
void grpc_conn_release(grpc_conn_t *c);

/* session_out.c, for the session, the transport and the calls.  Writes
 * what nghttp2 has to send, then reads on or closes. */
void grpc_conn_flush(grpc_conn_t *c);
void grpc_conn_close(grpc_conn_t *c);
void grpc_conn_goaway(grpc_conn_t *c, uint32_t error, const char *why);
/* A flood or protocol error: GOAWAY (ENHANCE_YOUR_CALM for a flood,
 * PROTOCOL_ERROR otherwise), the connection closes once it is sent; the
 * cut-off is counted and logged (the peer and the reason, at most one
 * line a second per thread). */
void grpc_conn_refuse(grpc_conn_t *c, grpc_refusal_t why);
/* A stream reset by the client: one token of the reset bucket; an empty
 * bucket cuts the connection off (a rapid-reset flood). */
void grpc_conn_count_reset(grpc_conn_t *c);
/* SIGTERM: GOAWAY now when no call is in flight; else a shutdown notice
 * now and the GOAWAY after the last call (grpc_conn_flush). */
void grpc_conn_drain(grpc_conn_t *c);
unsigned grpc_conn_idle_timeout_ms(const grpc_conn_t *c);
size_t grpc_conn_max_message(const grpc_conn_t *c);

/* A call: rpc.c's, whose fields stream.c fills as the request arrives.
 * GRPC_PREFIX_LEN: the message prefix (1 byte compressed flag, 4 bytes
 * length). */
#define GRPC_PREFIX_LEN 5

struct grpc_call_s {
	grpc_conn_t *conn; /* NULL once detached */
	sluice_grpc_t *g;
	grpc_call_t *prev, *next;
	grpc_call_t *pprev, *pnext; /* g's partial list */
	size_t charge;		    /* bytes counted in the budgets */
	int32_t id;
	const grpc_method_t *method;
	unsigned method_ix; /* its row in the method table (stream.c) */
	uint64_t start_ns;  /* uv_hrtime() at its headers: its latency */
	sluice_buf_t in;    /* request bytes: prefix and message */
	sluice_buf_t resp;  /* the answer's DATA: prefix and message */
	size_t resp_off;
	uv_timer_t *timer; /* grpc-timeout */
	uint64_t start_ms;
	size_t hdr_bytes;
	uint32_t msg_len; /* from the prefix */
	char path[128];
	char encoding[32];
	char timeout[16];
	int ctype; /* CT_* (stream.c) */
	unsigned post : 1;
	unsigned path_long : 1;
	unsigned has_encoding : 1;
	unsigned has_timeout : 1;
	unsigned have_prefix : 1;
	unsigned headers_done : 1;
	unsigned ended : 1;	 /* the client ended the stream */
	unsigned partial : 1;	 /* on g's partial list */
	unsigned answered : 1;	 /* an answer was submitted */
	unsigned hold : 1;	 /* the method answers later */
	unsigned rst_after : 1;	 /* RST_STREAM once the answer is sent */
	unsigned streaming : 1;	 /* headers sent, messages follow */
	unsigned stream_end : 1; /* trailers follow the messages */
	int end_status;
	char end_msg[128];
	int tag; /* the streaming method's */
};

/* stream.c: nghttp2 callbacks for session.c */
void grpc_call_install(nghttp2_session_callbacks *cbs);
/* Streams whose request has not arrived within the idle timeout; and
 * the streaming calls' update (the caller flushes after). */
void grpc_call_sweep(grpc_conn_t *c, uint64_t now, uint64_t timeout);

/* rpc.c, for the session: the connection is going: calls in flight
 * finish without it. */
void grpc_call_detach_all(grpc_conn_t *c);
/* The streaming calls' update alone (the drain; the caller flushes). */
void grpc_call_update_streams(grpc_conn_t *c);

/* rpc.c: for stream.c.  Drops the request bytes and their share of the
 * budgets; takes the call off its connection (its answer is dropped);
 * frees it (neither attached nor held); answers an error before anything
 * was sent (HEADERS only: http is the :status, 200 for gRPC errors;
 * accept_identity adds grpc-accept-encoding). */
void grpc_call_release_in(grpc_call_t *call);
/* Counts n more bytes the call holds in its connection's and thread's
 * budgets: -1 (nothing counted) when either would pass its bound,
 * unless force.  grpc_call_uncharge() gives n back. */
int grpc_call_charge(grpc_call_t *call, size_t n, int force);
void grpc_call_uncharge(grpc_call_t *call, size_t n);
/* The call's request message has begun arriving / is whole or gone:
 * on or off g's partial list. */
void grpc_call_partial(grpc_call_t *call, int on);
void grpc_call_detach(grpc_call_t *call);
void grpc_call_free(grpc_call_t *call);
void grpc_call_answer_error(grpc_call_t *call, int http, int status,
			    const char *msg, int accept_identity);

/* rpc.c: for the methods */
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
/* A server-streaming call: grpc_call_send() sends one message (the
 * response HEADERS before the first) and keeps the stream open;
 * grpc_call_end() ends it with the trailers' status and message (before
 * any message: trailers-only).  Neither touches a call whose stream is
 * gone.  A streaming call keeps one int for its method (the tag). */
void grpc_call_send(grpc_call_t *call, const ProtobufCMessage *msg);
void grpc_call_end(grpc_call_t *call, int status, const char *msg);
int grpc_call_tag(const grpc_call_t *call);
void grpc_call_set_tag(grpc_call_t *call, int tag);

/* wire.c: where a message's string fields are (bit N of strings: field
 * N is a string), and which fields are messages to look into. */
#define GRPC_WIRE_SUBS 2
typedef struct grpc_wire_msg_s {
	uint32_t strings;
	struct {
		uint32_t field;
		const struct grpc_wire_msg_s *msg;
	} subs[GRPC_WIRE_SUBS];
} grpc_wire_msg_t;

/* 1 when a string field of the message m describes (at any depth m
 * names) holds a NUL byte; 0 otherwise. */
int grpc_wire_has_nul(const uint8_t *p, size_t n, const grpc_wire_msg_t *m);

/* The methods (rls.c, health.c). */
void grpc_rls_should_rate_limit(grpc_call_t *call, const uint8_t *msg,
				size_t len);
void grpc_health_check(grpc_call_t *call, const uint8_t *msg, size_t len);
void grpc_health_watch(grpc_call_t *call, const uint8_t *msg, size_t len);
void grpc_health_watch_update(grpc_call_t *call);

#endif /* SLUICE_GRPC_INTERNAL_H */
