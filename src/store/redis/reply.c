/*
 * reply.c -- where a server's words enter the client: hiredis's RESP
 * reader with bounds on what one reply may claim, and the redaction of
 * what a server echoes back of our commands.
 *
 * Bounds: hiredis 0.14 trusts its peer.  "*2147483647\r\n" (14 bytes)
 * makes it calloc 16 GB of element pointers at once, and freeing that
 * half-read reply when the connection closes walks all 2^31 of them,
 * stalling the thread for seconds.  Here the reader builds its replies
 * through our functions, which refuse an array longer than
 * SLUICE_REDIS_REPLY_MAX_AGGREGATE, a reply announcing more than
 * SLUICE_REDIS_REPLY_MAX_ELEMENTS in all, and a string longer than
 * SLUICE_REDIS_REPLY_MAX_BYTES; the link also refuses to buffer more than
 * that of one unfinished reply.  A refusal is a protocol error: the link
 * fails, its calls fail, it reconnects.  The bounds fit every command the
 * client sends (see redis_int.h) with a wide margin.
 *
 * Redaction: a server that does not know AUTH (or HELLO) answers
 * "ERR unknown command 'AUTH', with args beginning with: 'user' 'pass'":
 * our password, in words the client would otherwise pass to the log,
 * /readyz, metrics' last error and Node's exceptions.  Every error and
 * status reply is cut after AUTH/HELLO and after "args beginning with:"
 * as it is read, before anything else sees it.
 */
#include "store/redis/redis_int.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reader's privdata: what the reply being read has announced, and
 * why it was refused. */
typedef struct reader_state_s {
	size_t announced; /* elements announced by the reply's arrays */
	char why[128];	  /* "" until a bound is crossed */
} reader_state_t;

/* ------------------------------------------------------------ redaction */

static const char REDACTED[] = " (redacted)";
_Static_assert(sizeof(REDACTED) <= SLUICE_REDIS_REDACT_ROOM,
	       "the marker fits the room redact() is given");

/* The end of the word at s[i..) when it is `w` (case-insensitive) standing
 * alone (no letter or digit on either side); 0 when it is not. */
static size_t word_at(const char *s, size_t len, size_t i, const char *w)
{
	size_t n = strlen(w), j;

	if (i + n > len || (i > 0 && isalnum((unsigned char)s[i - 1])))
		return 0;
	for (j = 0; j < n; j++)
		if (toupper((unsigned char)s[i + j]) != w[j])
			return 0;
	if (i + n < len && isalnum((unsigned char)s[i + n]))
		return 0;
	return i + n;
}

/* Where the redacted text is to be cut: after the first AUTH or HELLO
 * (and the quote closing it), or after "args beginning with:"; len when
 * nothing needs it. */
static size_t cut_point(const char *s, size_t len)
{
	static const char args[] = "args beginning with:";
	size_t i, e, alen = sizeof(args) - 1;

	for (i = 0; i < len; i++) {
		if ((e = word_at(s, len, i, "AUTH")) ||
		    (e = word_at(s, len, i, "HELLO"))) {
			if (e < len && strchr("'\"`", s[e]))
				e++;
			return e;
		}
		if (i + alen <= len && strncasecmp(s + i, args, alen) == 0)
			return i + alen;
	}
	return len;
}

size_t sluice_redis__redact(char *s, size_t len)
{
	size_t cut = cut_point(s, len), rest;

	/* Only spaces, commas or full stops after the cut: nothing to
	 * hide. */
	for (rest = cut; rest < len && s[rest] && strchr(" ,.", s[rest]);
	     rest++)
		;
	if (rest == len)
		return len;
	/* s has room for the marker (SLUICE_REDIS_REDACT_ROOM). */
	memcpy(s + cut, REDACTED, sizeof(REDACTED));
	return cut + sizeof(REDACTED) - 1;
}

/* ----------------------------------------------- the reply objects */

/* The objects are hiredis's own redisReply, made as hiredis makes them
 * (so freeReplyObject() frees them), hung on their parent array. */
static void *attach(const redisReadTask *task, redisReply *r)
{
	if (r && task->parent) {
		redisReply *parent = task->parent->obj;

		parent->element[task->idx] = r;
	}
	return r;
}

static void *refuse(const redisReadTask *task, const char *fmt, long long v)
{
	reader_state_t *st = task->privdata;

	if (st && !st->why[0])
		snprintf(st->why, sizeof(st->why), fmt, v);
	return NULL;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
	redisReply *r;

	if (len > SLUICE_REDIS_REPLY_MAX_BYTES)
		return refuse(task, "a string of %lld bytes", (long long)len);
	if (!(r = calloc(1, sizeof(*r))))
		return NULL;
	if (!(r->str = malloc(len + SLUICE_REDIS_REDACT_ROOM))) {
		free(r);
		return NULL;
	}
	r->type = task->type;
	memcpy(r->str, str, len);
	r->str[len] = '\0';
	r->len = len;
	if (r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS)
		r->len = sluice_redis__redact(r->str, r->len);
	return attach(task, r);
}

static void *create_array(const redisReadTask *task, int elements)
{
	reader_state_t *st = task->privdata;
	redisReply *r;

	/* hiredis refuses counts below -1 or beyond INT_MAX itself; a
	 * negative one here would be kept as a huge size_t. */
	if (elements < 0 || elements > SLUICE_REDIS_REPLY_MAX_AGGREGATE)
		return refuse(task, "an array of %lld elements",
			      (long long)elements);
	if (st) {
		st->announced += (size_t)elements;
		if (st->announced > SLUICE_REDIS_REPLY_MAX_ELEMENTS)
			return refuse(task,
				      "a reply of more than %lld elements",
				      SLUICE_REDIS_REPLY_MAX_ELEMENTS);
	}
	if (!(r = calloc(1, sizeof(*r))))
		return NULL;
	r->type = REDIS_REPLY_ARRAY;
	if (elements > 0 &&
	    !(r->element = calloc((size_t)elements, sizeof(*r->element)))) {
		free(r);
		return NULL;
	}
	r->elements = (size_t)elements;
	return attach(task, r);
}

static void *create_integer(const redisReadTask *task, long long value)
{
	redisReply *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->type = REDIS_REPLY_INTEGER;
	r->integer = value;
	return attach(task, r);
}

static void *create_nil(const redisReadTask *task)
{
	redisReply *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->type = REDIS_REPLY_NIL;
	return attach(task, r);
}

static redisReplyObjectFunctions bounded = {create_string, create_array,
					    create_integer, create_nil,
					    freeReplyObject};

/* ------------------------------------------------------------ the reader */

redisReader *sluice_redis__reader_new(void)
{
	redisReader *rd = redisReaderCreateWithFunctions(&bounded);
	reader_state_t *st = calloc(1, sizeof(*st));

	if (!rd || !st) {
		if (rd)
			redisReaderFree(rd);
		free(st);
		return NULL;
	}
	rd->privdata = st;
	return rd;
}

void sluice_redis__reader_free(redisReader *rd)
{
	if (!rd)
		return;
	/* Frees a half-read reply too: bounded, so quick. */
	free(rd->privdata);
	rd->privdata = NULL;
	redisReaderFree(rd);
}

int sluice_redis__reader_get(redisReader *rd, redisReply **reply, char *err,
			     size_t errlen)
{
	reader_state_t *st = rd->privdata;
	void *out = NULL;

	*reply = NULL;
	if (redisReaderGetReply(rd, &out) != REDIS_OK) {
		if (st->why[0])
			snprintf(err, errlen,
				 "protocol error: %s is beyond what sluice "
				 "reads",
				 st->why);
		else
			snprintf(err, errlen, "protocol error: %s", rd->errstr);
		return -1;
	}
	if (out) {
		/* A whole reply: the next one starts its count afresh. */
		st->announced = 0;
		*reply = out;
		return 0;
	}
	/* Incomplete: what is buffered of it is bounded too (a string
	 * announced with $<huge> arrives piece by piece). */
	if (rd->len - rd->pos > SLUICE_REDIS_REPLY_MAX_BYTES + 64) {
		snprintf(err, errlen,
			 "protocol error: a reply of more than %u bytes is "
			 "beyond what sluice reads",
			 SLUICE_REDIS_REPLY_MAX_BYTES);
		return -1;
	}
	return 0;
}
