/*
 * http_conn.c -- http-parser glue: bytes in, requests to the handlers
 * (handlers.c), answers out (written by http_resp.c).
 *
 * The parser pauses itself at the end of every request (on_message_complete)
 * so that requests are handled one at a time, in order, however many arrive
 * in one read: that is what makes pipelining and asynchronous decisions
 * simple.  Request bytes are copied into `head` as they arrive (the read
 * buffer is shared by every connection of the thread), each URL, name and
 * value NUL-terminated, so handlers see plain C strings.
 */
#include "serve/http_conn.h"
#include "serve/handlers.h"
#include "util/invariant.h"

#include <limits.h>
#include <string.h>
#include <strings.h>

static sluice_conn_t *conn_of(http_parser *p)
{
	return p->data;
}

static size_t max_header_bytes(const sluice_conn_t *c)
{
	return sluice_config_max_header_bytes(c->svc->live->cfg);
}

static size_t max_body_bytes(const sluice_conn_t *c)
{
	return sluice_config_max_body_bytes(c->svc->live->cfg);
}

/* ---------------------------------------------------- parser callbacks */

static int on_message_begin(http_parser *p)
{
	sluice_conn_t *c = conn_of(p);

	c->head.len = 0;
	c->body.len = 0;
	c->nhdrs = 0;
	c->url_len = 0;
	c->hstate = 0;
	c->in_trailers = 0;
	c->trailer_bytes = 0;
	c->err_status = 0;
	c->err_msg = NULL;
	c->in_message = 1;
	c->t_start_ns = sluice_conn_clock_ns();
	if (c->io && c->io->begin)
		c->io->begin(c);
	return 0;
}

/* Appends request-head bytes within max_header_bytes (431 beyond). */
static int head_append(sluice_conn_t *c, const char *at, size_t n)
{
	if (c->head.len + n + 1 > max_header_bytes(c)) {
		c->err_status = 431;
		return -1;
	}
	sluice_buf_append(&c->head, at, n);
	return c->head.oom ? -1 : 0;
}

/* Ends the URL, a name or a value with a NUL. */
static int head_terminate(sluice_conn_t *c)
{
	return head_append(c, "", 1);
}

static int on_url(http_parser *p, const char *at, size_t n)
{
	sluice_conn_t *c = conn_of(p);

	if (head_append(c, at, n) < 0)
		return -1;
	c->url_len += (uint32_t)n;
	return 0;
}

/* A request http-parser accepted but HTTP/1.1 forbids: 400, close. */
static int bad_request(sluice_conn_t *c, const char *msg)
{
	c->err_status = 400;
	c->err_msg = msg;
	return -1;
}

/* RFC 9110 tchar.  http-parser, built lenient, lets spaces into names:
 * "x-user-id : v" would arrive as a header named "x-user-id ", which a
 * proxy in front may treat differently from us (RFC 9112 section 5.1
 * says reject it). */
static int is_tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

/*
 * Trailer fields (after a chunked body) are counted against
 * max_header_bytes and dropped: only the request head decides.  Were they
 * kept, a client could name its own X-Real-IP, key or tier after the head
 * (and after check_request() looked at it), one fresh bucket a request.
 */
static int trailer_skip(sluice_conn_t *c, size_t n)
{
	c->trailer_bytes += n;
	if (c->trailer_bytes > max_header_bytes(c)) {
		c->err_status = 431;
		return -1;
	}
	return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t n)
{
	sluice_conn_t *c = conn_of(p);
	sluice_hdr_t *h;
	size_t i, start;

	if (c->in_trailers)
		return trailer_skip(c, n);
	if (c->hstate != 1) {
		if (head_terminate(c) < 0) /* ends the URL or last value */
			return -1;
		if (c->nhdrs == SLUICE_MAX_HEADERS) {
			c->err_status = 431;
			return -1;
		}
		h = &c->hdrs[c->nhdrs++];
		h->name_off = (uint32_t)c->head.len;
		h->name_len = 0;
		h->value_off = 0;
		h->value_len = 0;
		c->hstate = 1;
	}
	h = &c->hdrs[c->nhdrs - 1];
	for (i = 0; i < n; i++)
		if (!is_tchar((unsigned char)at[i]))
			return bad_request(c,
					   "invalid character in a header "
					   "name (no space before the colon)");
	start = c->head.len;
	if (head_append(c, at, n) < 0)
		return -1;
	for (i = start; i < c->head.len; i++) {
		char ch = c->head.data[i];

		if (ch >= 'A' && ch <= 'Z')
			c->head.data[i] = (char)(ch + ('a' - 'A'));
	}
	h->name_len += (uint32_t)n;
	return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
	sluice_conn_t *c = conn_of(p);
	sluice_hdr_t *h;

	if (c->in_trailers)
		return trailer_skip(c, n);
	h = &c->hdrs[c->nhdrs - 1];
	if (c->hstate != 2) {
		if (head_terminate(c) < 0) /* ends the name */
			return -1;
		h->value_off = (uint32_t)c->head.len;
		c->hstate = 2;
	} else if (!c->value_at_end) {
		/* A value arrives in pieces only when a read ended inside
		 * it; another piece after one that did not reach the end
		 * of the bytes is an obs-fold continuation line, which
		 * http-parser glues on (RFC 9112 section 5.2: reject). */
		return bad_request(c, "obsolete line folding in a header");
	}
	c->value_at_end = at + n == c->chunk_end;
	if (head_append(c, at, n) < 0)
		return -1;
	h->value_len += (uint32_t)n;
	return 0;
}

/* A client that sent "Expect: 100-continue" waits for a go-ahead before
 * sending the body (curl does for bodies over 1 KiB). */
static void expect_continue(sluice_conn_t *c, http_parser *p)
{
	size_t len;
	const char *v = sluice_conn_header(c, "expect", &len);

	if (v && len == 12 && strncasecmp(v, "100-continue", 12) == 0 &&
	    p->http_minor >= 1 &&
	    ((p->content_length > 0 && p->content_length != ULLONG_MAX) ||
	     (p->flags & F_CHUNKED)))
		sluice_buf_puts(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
}

/* Reduces an absolute-form target ("http://host/v1/check?x") to its
 * path and query in place, so that it is routed like "/v1/check?x"
 * (RFC 9112 section 3.2.2: a server must accept the absolute form). */
static int origin_form(sluice_conn_t *c, const http_parser *p)
{
	char *url = c->head.data;
	struct http_parser_url u;
	size_t n = 0, off, len;

	if (c->url_len > 0 && url[0] == '/')
		return 0;
	if (p->method == HTTP_CONNECT || (c->url_len == 1 && url[0] == '*'))
		return 0; /* authority and asterisk forms: no such path */
	http_parser_url_init(&u);
	if (http_parser_parse_url(url, c->url_len, 0, &u) != 0 ||
	    !(u.field_set & (1 << UF_SCHEMA)) ||
	    !(u.field_set & (1 << UF_HOST)))
		return bad_request(c, "the request target is neither a path "
				      "nor an absolute http URL");
	off = u.field_data[UF_SCHEMA].off;
	len = u.field_data[UF_SCHEMA].len;
	if (!((len == 4 && strncasecmp(url + off, "http", 4) == 0) ||
	      (len == 5 && strncasecmp(url + off, "https", 5) == 0)))
		return bad_request(c, "the request target's scheme is not "
				      "http or https");
	/* The result is shorter than the URL and built left to right
	 * from later bytes: memmove in place is safe. */
	if (u.field_set & (1 << UF_PATH)) {
		off = u.field_data[UF_PATH].off;
		len = u.field_data[UF_PATH].len;
		memmove(url, url + off, len);
		n = len;
	} else {
		url[n++] = '/';
	}
	if (u.field_set & (1 << UF_QUERY)) {
		off = u.field_data[UF_QUERY].off;
		len = u.field_data[UF_QUERY].len;
		url[n++] = '?';
		memmove(url + n, url + off, len);
		n += len;
	}
	url[n] = '\0';
	c->url_len = (uint32_t)n;
	return 0;
}

/* uri-host [":" port] (RFC 3986 characters, "[v6]" included); may be
 * empty. */
static int is_authority(const char *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)v[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') ||
		      (ch && strchr("-._~%!$&'()*+,;=:[]", ch) != NULL)))
			return 0;
	}
	return 1;
}

/* What http-parser accepts but RFC 9112 does not: another version than
 * 1.0 or 1.1 (505), an HTTP/1.1 request without exactly one valid Host
 * (400),
 * a target in absolute form (reduced to its path). */
static int check_request(sluice_conn_t *c, const http_parser *p)
{
	size_t i, hosts = 0;

	if (p->http_major != 1 || p->http_minor > 1) {
		c->err_status = 505;
		return -1;
	}
	for (i = 0; i < c->nhdrs; i++) {
		const sluice_hdr_t *h = &c->hdrs[i];

		if (h->name_len != 4 ||
		    memcmp(c->head.data + h->name_off, "host", 4) != 0)
			continue;
		hosts++;
		if (!is_authority(c->head.data + h->value_off, h->value_len))
			return bad_request(c, "the Host header is not a host "
					      "and port");
	}
	if (hosts > 1)
		return bad_request(c, "more than one Host header");
	if (hosts == 0 && p->http_minor == 1)
		return bad_request(c, "Host is required in HTTP/1.1");
	return origin_form(c, p);
}

static int on_headers_complete(http_parser *p)
{
	sluice_conn_t *c = conn_of(p);
	size_t i;

	if (c->hstate == 1 || head_terminate(c) < 0)
		return -1;
	/* What http-parser reports as header fields from now on are
	 * trailers (see trailer_skip()). */
	c->in_trailers = 1;
	/* A header without a value (only possible when the name was the
	 * last thing received) points at the terminating NUL. */
	for (i = 0; i < c->nhdrs; i++)
		if (c->hdrs[i].value_off == 0)
			c->hdrs[i].value_off = (uint32_t)c->head.len - 1;
	if (check_request(c, p) < 0)
		return -1;
	if (p->content_length != ULLONG_MAX &&
	    p->content_length > max_body_bytes(c)) {
		c->err_status = 413;
		return -1;
	}
	expect_continue(c, p);
	if (p->flags & F_CHUNKED) {
		/* Stop here, so that process() knows where the body starts
		 * and checks its chunked framing (chunk_check()). */
		c->chunk_head = 1;
		http_parser_pause(p, 1);
	}
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t n)
{
	sluice_conn_t *c = conn_of(p);

	if (c->body.len + n > max_body_bytes(c)) {
		c->err_status = 413;
		return -1;
	}
	sluice_buf_append(&c->body, at, n);
	return c->body.oom ? -1 : 0;
}

static int on_message_complete(http_parser *p)
{
	sluice_conn_t *c = conn_of(p);

	c->in_message = 0;
	c->ready = 1;
	c->method = (int)p->method;
	c->keep_alive = http_should_keep_alive(p);
	/* One request at a time: execute() returns here. */
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings settings = {
	.on_message_begin = on_message_begin,
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

/* ------------------------------------------------------ chunked framing */

/*
 * http-parser, built lenient, takes any two bytes after a chunk's data for
 * its CRLF and anything up to the CR after a chunk size for an extension
 * ("5 junk"): a proxy in front that frames the body otherwise (RFC 9112
 * section 7.1) would then see another request end, and another begin,
 * than we do.  So the body's bytes, as the parser consumes them, go
 * through this strict reading of the grammar too:
 *
 *   chunk      = 1*HEXDIG *( BWS ";" BWS token [ BWS "=" BWS
 *                (token / quoted-string) ] ) CRLF data CRLF
 *   last-chunk = the same with size 0, then trailer lines, each ending
 *                in CRLF, and an empty line.
 */
enum {
	CK_SIZE_FIRST, /* the first digit of a chunk size */
	CK_SIZE,
	CK_BWS_SEMI, /* whitespace, before a ';' */
	CK_NAME_BWS, /* after ';', before an extension name */
	CK_NAME,
	CK_NAME_END, /* whitespace after a name: '=' or ';' next */
	CK_VAL_BWS,  /* after '=' */
	CK_TOKEN,
	CK_QSTR,
	CK_QESC,
	CK_VAL_END, /* after a quoted string */
	CK_SIZE_LF,
	CK_DATA,
	CK_DATA_CR,
	CK_DATA_LF,
	CK_TRAILER_START,
	CK_TRAILER,
	CK_TRAILER_LF,
	CK_END_LF,
	CK_DONE
};

static int hexdig(unsigned char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Ends a size line's extensions: CR, then LF. */
static int ext_next(unsigned char ch, int *state)
{
	if (ch == '\r')
		*state = CK_SIZE_LF;
	else if (ch == ';')
		*state = CK_NAME_BWS;
	else if (ch == ' ' || ch == '\t')
		*state = CK_BWS_SEMI;
	else
		return -1;
	return 0;
}

/* One byte of a size line's extensions, after the size (the states
 * CK_BWS_SEMI to CK_VAL_END): -1 when it breaks the grammar. */
static int ext_step(unsigned char ch, int *state)
{
	switch (*state) {
	case CK_BWS_SEMI:
		if (ch == ';')
			*state = CK_NAME_BWS;
		else if (ch != ' ' && ch != '\t')
			return -1;
		break;
	case CK_NAME_BWS:
		if (is_tchar(ch))
			*state = CK_NAME;
		else if (ch != ' ' && ch != '\t')
			return -1;
		break;
	case CK_NAME:
		if (ch == '=')
			*state = CK_VAL_BWS;
		else if (ch == ' ' || ch == '\t')
			*state = CK_NAME_END;
		else if (!is_tchar(ch) && ext_next(ch, state) < 0)
			return -1;
		break;
	case CK_NAME_END:
		if (ch == '=')
			*state = CK_VAL_BWS;
		else if (ch == ';')
			*state = CK_NAME_BWS;
		else if (ch != ' ' && ch != '\t')
			return -1;
		break;
	case CK_VAL_BWS:
		if (ch == '"')
			*state = CK_QSTR;
		else if (is_tchar(ch))
			*state = CK_TOKEN;
		else if (ch != ' ' && ch != '\t')
			return -1;
		break;
	case CK_TOKEN:
		if (!is_tchar(ch) && ext_next(ch, state) < 0)
			return -1;
		break;
	case CK_QSTR: /* qdtext: HTAB, SP, VCHAR but " and \, obs-text */
		if (ch == '"')
			*state = CK_VAL_END;
		else if (ch == '\\')
			*state = CK_QESC;
		else if (ch != '\t' && (ch < 0x20 || ch == 0x7f))
			return -1;
		break;
	case CK_QESC:
		if (ch != '\t' && (ch < 0x20 || ch == 0x7f))
			return -1;
		*state = CK_QSTR;
		break;
	case CK_VAL_END:
		if (ext_next(ch, state) < 0)
			return -1;
		break;
	}
	return 0;
}

/* One byte of a chunk's size line before its extension: a hex digit, or
 * what may end the digits (ext_next()).  -1 when it breaks the framing. */
static int size_step(sluice_conn_t *c, unsigned char ch)
{
	int d = hexdig(ch);

	if (d >= 0) {
		if (c->ck_left >> 59)
			return -1; /* far past any limit */
		c->ck_left = c->ck_left * 16 + (uint64_t)d;
		c->ck_state = CK_SIZE;
		return 0;
	}
	if (c->ck_state == CK_SIZE_FIRST || ext_next(ch, &c->ck_state) < 0)
		return -1;
	return 0;
}

/* A byte that must be want: the state after it next, or -1. */
static int expect(sluice_conn_t *c, unsigned char ch, unsigned char want,
		  int next)
{
	if (ch != want)
		return -1;
	c->ck_state = next;
	return 0;
}

/* One byte of the line ends around a chunk's data, of the trailer, or
 * after the message's end (CK_DONE: the parser stops there).  -1 when it
 * breaks the framing. */
static int frame_step(sluice_conn_t *c, unsigned char ch)
{
	switch (c->ck_state) {
	case CK_SIZE_LF:
		return expect(c, ch, '\n',
			      c->ck_left ? CK_DATA : CK_TRAILER_START);
	case CK_DATA_CR:
		return expect(c, ch, '\r', CK_DATA_LF);
	case CK_DATA_LF:
		return expect(c, ch, '\n', CK_SIZE_FIRST);
	case CK_TRAILER_START:
		c->ck_state = ch == '\r' ? CK_END_LF : CK_TRAILER;
		return ch == '\n' ? -1 : 0;
	case CK_TRAILER:
		if (ch == '\r')
			c->ck_state = CK_TRAILER_LF;
		return ch == '\n' ? -1 : 0;
	case CK_TRAILER_LF:
		return expect(c, ch, '\n', CK_TRAILER_START);
	case CK_END_LF:
		return expect(c, ch, '\n', CK_DONE);
	default: /* CK_DONE: the parser stops at the message's end */
		return -1;
	}
}

/* Of the n bytes left, those of the current chunk's data: how many. */
static size_t data_skip(sluice_conn_t *c, size_t n)
{
	size_t take = n;

	if (take > c->ck_left)
		take = (size_t)c->ck_left;
	c->ck_left -= take;
	if (c->ck_left == 0)
		c->ck_state = CK_DATA_CR;
	return take;
}

/* Reads n more body bytes; -1 at the first that breaks the framing. */
static int chunk_check(sluice_conn_t *c, const char *data, size_t n)
{
	size_t i = 0;
	int rc;

	while (i < n) {
		unsigned char ch = (unsigned char)data[i];

		switch (c->ck_state) {
		case CK_DATA: /* the data itself, in one step */
			i += data_skip(c, n - i);
			continue;
		case CK_SIZE_FIRST:
		case CK_SIZE:
			rc = size_step(c, ch);
			break;
		case CK_BWS_SEMI:
		case CK_NAME_BWS:
		case CK_NAME:
		case CK_NAME_END:
		case CK_VAL_BWS:
		case CK_TOKEN:
		case CK_QSTR:
		case CK_QESC:
		case CK_VAL_END:
			rc = ext_step(ch, &c->ck_state);
			break;
		default:
			rc = frame_step(c, ch);
			break;
		}
		if (rc < 0)
			return -1;
		i++;
	}
	return 0;
}

/* -------------------------------------------------------------- driving */

void sluice_conn_init(sluice_conn_t *c, sluice_svc_t *svc,
		      const sluice_conn_io_t *io, const struct sockaddr *peer)
{
	memset(c, 0, sizeof(*c));
	c->svc = svc;
	c->io = io;
	if (peer) {
		size_t len = peer->sa_family == AF_INET6
				     ? sizeof(struct sockaddr_in6)
				     : sizeof(struct sockaddr_in);
		memcpy(&c->peer, peer, len);
	}
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
}

int sluice_conn_idle(const sluice_conn_t *c)
{
	return !c->in_message && !c->waiting && !c->ready;
}

/* A request the parser refused: answer and close. */
static void reject(sluice_conn_t *c, enum http_errno err)
{
	int status = c->err_status;

	if (!status)
		status = err == HPE_HEADER_OVERFLOW ? 431 : 400;
	c->keep_alive = 0;
	c->method = HTTP_GET;
	if (!c->in_message)
		c->t_start_ns = sluice_conn_clock_ns();
	c->in_message = 0;
	switch (status) {
	case 413:
		sluice_resp_error(c, 413, "body_too_large", NULL,
				  "the request body exceeds max_body_bytes");
		break;
	case 431:
		sluice_resp_error(c, 431, "headers_too_large", NULL,
				  "the request head exceeds max_header_bytes");
		break;
	case 505:
		sluice_resp_error(
			c, 505, "http_version_not_supported", NULL,
			"only versions 1.0 and 1.1 of HTTP are served");
		break;
	default:
		sluice_resp_error(c, 400, "bad_request", NULL,
				  c->err_msg ? c->err_msg
					     : http_errno_description(err));
	}
	c->want_close = 1;
}

static void dispatch(sluice_conn_t *c)
{
	/* One request at a time: nothing pending when the next is handled. */
	SLUICE_ASSERT(!c->waiting && !c->take);
	c->req_live = c->svc->live;
	c->dispatching = 1;
	sluice_handle(c);
	c->dispatching = 0;
	if (c->waiting) /* spans loop iterations: keep the config alive */
		sluice_live_ref(c->req_live);
	else
		sluice_conn_trim(c);
	if (c->parser.upgrade) /* we speak no other protocol */
		c->want_close = 1;
}

static void process(sluice_conn_t *c, const char *data, size_t len)
{
	while (len > 0 && !c->want_close) {
		size_t n;
		enum http_errno err;

		if (c->out_high && c->out.len >= c->out_high) {
			/* Answers pile up unread: hold the rest until out
			 * is written (the transport stops reading). */
			sluice_buf_append(&c->in, data, len);
			return;
		}
		c->chunk_end = data + len;
		n = http_parser_execute(&c->parser, &settings, data, len);
		err = HTTP_PARSER_ERRNO(&c->parser);

		if (err == HPE_PAUSED) {
			http_parser_pause(&c->parser, 0);
		} else if (err != HPE_OK) {
			reject(c, err);
			return;
		}
		if (c->ck_active) {
			/* The first byte after the pause at the head's end is
			 * the head's last LF again. */
			size_t skip = c->ck_skip && n > 0 ? 1 : 0;

			if (n > 0)
				c->ck_skip = 0;
			if (chunk_check(c, data + skip, n - skip) < 0) {
				c->ready = 0;
				c->ck_active = 0;
				c->err_msg = "malformed chunked body (RFC 9112 "
					     "section 7.1)";
				c->err_status = 400;
				reject(c, HPE_INVALID_CHUNK_SIZE);
				return;
			}
			if (c->ck_state == CK_DONE)
				c->ck_active = 0;
		}
		data += n;
		len -= n;
		if (c->chunk_head) {
			/* Paused at the end of a chunked request's head: the
			 * body's bytes are checked from here on. */
			c->chunk_head = 0;
			c->ck_active = 1;
			c->ck_skip = 1;
			c->ck_state = CK_SIZE_FIRST;
			c->ck_left = 0;
			continue;
		}
		if (!c->ready) {
			if (n == 0 || c->parser.upgrade)
				c->want_close = 1; /* cannot progress */
			continue;
		}
		c->ready = 0;
		dispatch(c);
		if (c->waiting) {
			sluice_buf_append(&c->in, data, len);
			return;
		}
	}
}

void sluice_conn_feed(sluice_conn_t *c, const char *data, size_t len)
{
	if (c->waiting || c->in.len) {
		sluice_buf_append(&c->in, data, len);
		return;
	}
	process(c, data, len);
	if (c->in.oom || c->out.oom || c->head.oom || c->body.oom)
		c->want_close = 1;
}

void sluice_conn_resume(sluice_conn_t *c)
{
	sluice_buf_t pending = c->in;

	if (c->waiting)
		return;
	memset(&c->in, 0, sizeof(c->in));
	process(c, pending.data, pending.len);
	sluice_buf_free(&pending);
}

void sluice_conn_eof(sluice_conn_t *c)
{
	if (!c->waiting)
		c->want_close = 1;
}

int sluice_conn_release(sluice_conn_t *c)
{
	c->released = 1;
	if (c->waiting)
		return 0;
	sluice_conn_free_bufs(c);
	return 1;
}
