/*
 * http_resp.c -- what a handler reads of its request and writes as its
 * answer on an HTTP connection (the "for the handlers" part of
 * http_conn.h), and the connection's buffer keeping both sides share.
 * It calls nothing of http_conn.c or the handlers, so the parser glue
 * (http_conn.c) calls the handlers and both call this, one way.
 */
#include "serve/http_conn.h"
#include "util/invariant.h"

#include <string.h>
#include <time.h>

/* ---------------------------------------------------- the connection */

uint64_t sluice_conn_clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A connection keeps its buffers between requests, but not big ones: a
 * single large request must not pin memory for the connection's life. */
void sluice_conn_trim(sluice_conn_t *c)
{
	if (c->head.cap > 4096)
		sluice_buf_free(&c->head);
	if (c->body.cap > 4096)
		sluice_buf_free(&c->body);
}

void sluice_conn_free_bufs(sluice_conn_t *c)
{
	sluice_buf_free(&c->head);
	sluice_buf_free(&c->body);
	sluice_buf_free(&c->in);
	sluice_buf_free(&c->out);
}

void sluice_conn_wait(sluice_conn_t *c)
{
	SLUICE_ASSERT(!c->waiting); /* at most one decision pending */
	c->waiting = 1;
}

/* ------------------------------------------------------------ answers */

const char *sluice_conn_header(const sluice_conn_t *c, const char *lname,
			       size_t *len)
{
	return sluice_conn_header_line(c, lname, 0, len);
}

const char *sluice_conn_header_line(const sluice_conn_t *c, const char *lname,
				    size_t index, size_t *len)
{
	size_t i, n = strlen(lname);

	for (i = 0; i < c->nhdrs; i++) {
		const sluice_hdr_t *h = &c->hdrs[i];

		if (h->name_len == n &&
		    memcmp(c->head.data + h->name_off, lname, n) == 0 &&
		    index-- == 0) {
			if (len)
				*len = h->value_len;
			return c->head.data + h->value_off;
		}
	}
	return NULL;
}

const char *sluice_status_text(int status)
{
	switch (status) {
	case 100:
		return "Continue";
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 429:
		return "Too Many Requests";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 503:
		return "Service Unavailable";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Unknown";
	}
}

/* "Date: <IMF-fixdate>\r\n" (RFC 9110 asks an origin server with a clock
 * to send it), formatted once a second per thread. */
static const char *date_line(size_t *len)
{
	static _Thread_local char line[64];
	static _Thread_local size_t n;
	static _Thread_local time_t cached = -1;
	time_t now = time(NULL);

	if (now != cached) {
		struct tm tm;

		gmtime_r(&now, &tm);
		n = strftime(line, sizeof(line),
			     "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
		cached = now;
	}
	*len = n;
	return line;
}

void sluice_resp_begin(sluice_conn_t *c, int status)
{
	const char *date;
	size_t dlen;

	sluice_buf_reserve(&c->out, 512); /* one answer, usually */
	sluice_buf_puts(&c->out, "HTTP/1.1 ");
	sluice_buf_u64(&c->out, (uint64_t)status);
	sluice_buf_append(&c->out, " ", 1);
	sluice_buf_puts(&c->out, sluice_status_text(status));
	sluice_buf_append(&c->out, "\r\n", 2);
	date = date_line(&dlen);
	sluice_buf_append(&c->out, date, dlen);
	c->status = status;
}

void sluice_resp_end(sluice_conn_t *c, const char *ctype, const char *body,
		     size_t len)
{
	sluice_buf_t *o = &c->out;
	/* After a 400 the client and we may disagree on where the next
	 * request starts (docs/HTTP.md): close. */
	int close = !c->keep_alive || c->want_close || c->svc->draining ||
		    c->aged || c->status == 400;

	if (ctype) {
		sluice_buf_puts(o, "Content-Type: ");
		sluice_buf_puts(o, ctype);
		sluice_buf_append(o, "\r\n", 2);
	}
	sluice_buf_puts(o, "Content-Length: ");
	sluice_buf_u64(o, len);
	if (close) {
		sluice_buf_puts(o, "\r\nConnection: close\r\n\r\n");
		c->want_close = 1;
	} else if (c->parser.http_minor == 0) {
		sluice_buf_puts(o, "\r\nConnection: keep-alive\r\n\r\n");
	} else {
		sluice_buf_append(o, "\r\n\r\n", 4);
	}
	if (c->method != HTTP_HEAD)
		sluice_buf_append(o, body, len);

	sluice_metrics_response(c->svc->metrics, c->status,
				sluice_conn_clock_ns() - c->t_start_ns);
	if (c->waiting) {
		c->waiting = 0;
		if (!c->dispatching) {
			sluice_live_unref(c->req_live);
			if (c->released) {
				sluice_conn_free_bufs(c);
				if (c->io && c->io->release)
					c->io->release(c);
			} else {
				sluice_conn_trim(c);
				if (c->io && c->io->wake)
					c->io->wake(c);
			}
		}
	}
}

void sluice_resp_error(sluice_conn_t *c, int status, const char *code,
		       const char *field, const char *message)
{
	sluice_buf_t body = {0};

	sluice_buf_puts(&body, "{\"error\":\"");
	sluice_buf_json_str(&body, code, strlen(code));
	if (field) {
		sluice_buf_puts(&body, "\",\"field\":\"");
		sluice_buf_json_str(&body, field, strlen(field));
	}
	sluice_buf_puts(&body, "\",\"message\":\"");
	sluice_buf_json_str(&body, message, strlen(message));
	sluice_buf_puts(&body, "\"}");
	sluice_resp_begin(c, status);
	sluice_resp_end(c, "application/json", body.data, body.len);
	sluice_buf_free(&body);
}
