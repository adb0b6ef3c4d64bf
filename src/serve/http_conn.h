/*
 * http_conn.h -- one HTTP/1.1 connection as a byte-processing state machine.
 *
 * http_conn.c turns bytes into requests (http-parser), enforces the limits on
 * what a client may send (431, 413, 400), calls the handlers, and appends
 * answers to `out`.  It never touches a socket: the transport (tcp.c,
 * or a fuzzer) feeds bytes in with sluice_conn_feed(), writes out `out`,
 * and closes when `want_close` is set and `out` is empty.
 *
 * Pipelining: bytes for several requests may arrive at once.  Requests are
 * answered strictly in order; while a decision is pending (an asynchronous
 * store) parsing stops and the unparsed bytes wait in `in`, and the
 * transport should stop reading (sluice_conn_waiting()).  When the answer
 * arrives, io->wake() tells the transport to write and call
 * sluice_conn_resume().
 */
#ifndef SLUICE_SERVE_HTTP_CONN_H
#define SLUICE_SERVE_HTTP_CONN_H

#include "policy/svc.h"
#include "serve/metrics.h"
#include "util/buf.h"

#include <http_parser.h>
#include <stdint.h>
#include <sys/socket.h>

#define SLUICE_MAX_HEADERS 64

typedef struct sluice_conn_s sluice_conn_t;

typedef struct sluice_conn_io_s {
	/* A request started (the transport restarts its timeout). */
	void (*begin)(sluice_conn_t *c);
	/* An asynchronous answer was appended to out. */
	void (*wake)(sluice_conn_t *c);
	/* The connection was released while a decision was pending and
	 * can now be freed (the transport had closed it). */
	void (*release)(sluice_conn_t *c);
} sluice_conn_io_t;

typedef struct sluice_hdr_s {
	uint32_t name_off, name_len; /* names are stored lower-case */
	uint32_t value_off, value_len;
} sluice_hdr_t;

struct sluice_conn_s {
	sluice_svc_t *svc;
	const sluice_conn_io_t *io;
	struct sockaddr_storage peer;

	http_parser parser;
	/* the request being received */
	sluice_buf_t head; /* URL, then header names and values */
	sluice_buf_t body;
	sluice_hdr_t hdrs[SLUICE_MAX_HEADERS];
	size_t nhdrs;
	uint32_t url_len;
	int hstate;		   /* 0 none, 1 in a name, 2 in a value */
	int err_status;		   /* 400/413/431/505 found in a callback */
	const char *err_msg;	   /* its message (400) */
	const char *chunk_end;	   /* end of the bytes being parsed */
	unsigned value_at_end : 1; /* last value piece ended the chunk */
	unsigned in_trailers : 1;  /* past the head: fields are trailers */
	size_t trailer_bytes;	   /* of trailer fields, bounded too */
	/* chunked framing, checked by http_conn.c beside the parser */
	unsigned chunk_head : 1; /* paused at the end of a chunked head */
	unsigned ck_active : 1;	 /* reading a chunked body */
	unsigned ck_skip : 1;	 /* the next byte is the head's last LF */
	int ck_state;
	uint64_t ck_left; /* the chunk size being read, or data left */
	uint64_t t_start_ns;

	/* the request being answered */
	int method; /* enum http_method */
	int keep_alive;
	int status;		 /* of the answer being written */
	sluice_live_t *req_live; /* config the request was decided with */
	sluice_take_t *take;	 /* decision in flight */

	unsigned in_message : 1; /* between first byte and last of a request */
	unsigned ready : 1;	 /* a complete request awaits dispatch */
	unsigned waiting : 1;	 /* a decision is pending */
	unsigned dispatching : 1;
	unsigned want_close : 1;  /* close once out is written */
	unsigned released : 1;	  /* the transport is gone */
	unsigned admin_port : 1;  /* accepted on admin.listen */
	unsigned admin_apart : 1; /* admin endpoints on admin.listen only */
	/* Past http.max_connection_age_ms (the transport says so when a
	 * request starts): its answer says Connection: close. */
	unsigned aged : 1;

	sluice_buf_t in;  /* received, not yet parsed (while waiting) */
	sluice_buf_t out; /* answers not yet written */
	/* Parsing stops while out holds this many bytes (0: no bound), and
	 * the rest waits in `in`: a client that sends requests but never
	 * reads the answers cannot make us buffer them without end.  The
	 * transport sets it and resumes once out is written. */
	size_t out_high;
};

void sluice_conn_init(sluice_conn_t *c, sluice_svc_t *svc,
		      const sluice_conn_io_t *io, const struct sockaddr *peer);

/* Processes received bytes (answers go to c->out). */
void sluice_conn_feed(sluice_conn_t *c, const char *data, size_t len);

/* Continues with bytes held back while a decision was pending. */
void sluice_conn_resume(sluice_conn_t *c);

/* The peer closed its side: a partial request is dropped. */
void sluice_conn_eof(sluice_conn_t *c);

/* 1 while a decision is pending: the transport should not read. */
static inline int sluice_conn_waiting(const sluice_conn_t *c)
{
	return c->waiting;
}

/* 1 while received requests wait for out to be written (out_high). */
static inline int sluice_conn_backlogged(const sluice_conn_t *c)
{
	return !c->waiting && c->in.len > 0;
}

/* 1 when no request is partly received or pending (safe to close). */
int sluice_conn_idle(const sluice_conn_t *c);

/*
 * The transport is done with the connection.  Returns 1 when it may free
 * it now; 0 when a decision is pending (io->release() runs later).
 */
int sluice_conn_release(sluice_conn_t *c);

/* ------------------------------------------------ for the handlers */

/* Defined in http_resp.c, which calls nothing of http_conn.c or of the
 * handlers: the handlers and the parser glue both call it. */

/* The request's header `lname` (lower-case), or NULL. */
const char *sluice_conn_header(const sluice_conn_t *c, const char *lname,
			       size_t *len);
/* Its index-th line (0 the first), or NULL past the last. */
const char *sluice_conn_header_line(const sluice_conn_t *c, const char *lname,
				    size_t index, size_t *len);

/* The request target: path and query (an absolute-form target,
 * "http://host/path?q", is reduced to its path and query). */
static inline const char *sluice_conn_url(const sluice_conn_t *c)
{
	return c->head.data;
}

/* Starts an answer: status line; header lines may follow in c->out. */
void sluice_resp_begin(sluice_conn_t *c, int status);

/* Ends it: Content-Type (when ctype), Content-Length, Connection, the
 * blank line and the body (not for HEAD).  This completes the request.
 * After an asynchronous decision this may free c (when the transport has
 * released it meanwhile): the caller must not touch c afterwards. */
void sluice_resp_end(sluice_conn_t *c, const char *ctype, const char *body,
		     size_t len);

/* A whole JSON error answer: {"error":code[,"field":f],"message":m}. */
void sluice_resp_error(sluice_conn_t *c, int status, const char *code,
		       const char *field, const char *message);

/* Marks the request as waiting for an asynchronous decision; the handler
 * answers later with sluice_resp_begin()/sluice_resp_end(). */
void sluice_conn_wait(sluice_conn_t *c);

const char *sluice_status_text(int status);

/* ------------------------------- between http_conn.c and http_resp.c */

/* The monotonic clock a request's latency is measured on. */
uint64_t sluice_conn_clock_ns(void);
/* Frees the request buffers that grew large (kept small between
 * requests); frees every buffer (the connection is done). */
void sluice_conn_trim(sluice_conn_t *c);
void sluice_conn_free_bufs(sluice_conn_t *c);

#endif /* SLUICE_SERVE_HTTP_CONN_H */
