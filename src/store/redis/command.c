/*
 * command.c -- commands in RESP: a writer that builds
 * "*N\r\n$len\r\narg\r\n..." in a buffer on the stack (growing on the heap
 * for large commands), the key names of a call written straight into it,
 * and a small formatter for the fixed commands of handshakes and probes.
 *
 * The writer is ours rather than hiredis' redisFormatCommand, which goes
 * through sdscatfmt for every argument: it was the client's largest cost
 * per decision.
 */
#include "store/redis/redis_int.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------------- writer */

void sluice_redis__resp_init(sluice_redis_resp_t *o)
{
	o->buf = o->stack;
	o->len = 0;
	o->cap = sizeof(o->stack);
	o->failed = 0;
}

void sluice_redis__resp_free(sluice_redis_resp_t *o)
{
	if (o->buf != o->stack)
		free(o->buf);
	sluice_redis__resp_init(o);
}

/* Room for n more bytes; 0, or -1 (and failed) when out of memory. */
static int reserve(sluice_redis_resp_t *o, size_t n)
{
	size_t cap = o->cap;
	char *grown;

	if (o->failed)
		return -1;
	if (o->len + n <= o->cap)
		return 0;
	while (cap < o->len + n)
		cap *= 2;
	grown = o->buf == o->stack ? malloc(cap) : realloc(o->buf, cap);
	if (!grown) {
		o->failed = 1;
		return -1;
	}
	if (o->buf == o->stack)
		memcpy(grown, o->stack, o->len);
	o->buf = grown;
	o->cap = cap;
	return 0;
}

static void put_len(sluice_redis_resp_t *o, char tag, size_t n)
{
	char *p = o->buf + o->len;

	*p++ = tag;
	p += sluice_u64_dec(p, n);
	*p++ = '\r';
	*p++ = '\n';
	o->len = (size_t)(p - o->buf);
}

void sluice_redis__resp_array(sluice_redis_resp_t *o, size_t n)
{
	if (reserve(o, 24) == 0)
		put_len(o, '*', n);
}

/* One bulk string made of a then b (b may be empty). */
static void arg2(sluice_redis_resp_t *o, const char *a, size_t alen,
		 const char *b, size_t blen)
{
	if (reserve(o, alen + blen + 26) < 0)
		return;
	put_len(o, '$', alen + blen);
	memcpy(o->buf + o->len, a, alen);
	if (blen)
		memcpy(o->buf + o->len + alen, b, blen);
	o->len += alen + blen;
	o->buf[o->len++] = '\r';
	o->buf[o->len++] = '\n';
}

void sluice_redis__resp_arg(sluice_redis_resp_t *o, const char *s, size_t len)
{
	arg2(o, s, len, "", 0);
}

void sluice_redis__resp_u64(sluice_redis_resp_t *o, uint64_t v)
{
	char num[24];

	arg2(o, num, sluice_u64_dec(num, v), "", 0);
}

/* "<prefix>{<key>}:<limit id>" for every limit of the call (see
 * sluice_limit_id()): a bucket is named by its limit, never by the
 * limit's position. */
void sluice_redis__resp_keys(sluice_redis_resp_t *o,
			     const sluice_redis_call_t *c)
{
	char id[SLUICE_LIMIT_ID_MAX];
	size_t i;

	for (i = 0; i < c->nlimits; i++)
		arg2(o, c->keybase, c->keybaselen, id,
		     sluice_limit_id(&c->limits[i], id));
}

/* ------------------------------------------------------------ formatter */

/* Calls fn on each argument of fmt (see sluice_redis__command()); the
 * number of arguments. */
static size_t each_arg(const char *fmt, va_list ap, sluice_redis_resp_t *o)
{
	const char *p = fmt;
	size_t n = 0, len;

	while (*p) {
		len = strcspn(p, " ");
		if (len == 2 && p[0] == '%' && p[1] == 's') {
			const char *s = va_arg(ap, const char *);

			if (o)
				sluice_redis__resp_arg(o, s, strlen(s));
		} else if (len == 2 && p[0] == '%' && p[1] == 'd') {
			int v = va_arg(ap, int);
			char num[24];
			size_t k = 0;

			if (v < 0)
				num[k++] = '-';
			k += sluice_u64_dec(num + k,
					    v < 0 ? (uint64_t)0 - (uint64_t)v
						  : (uint64_t)v);
			if (o)
				sluice_redis__resp_arg(o, num, k);
		} else if (len == 2 && p[0] == '%' && p[1] == 'b') {
			const char *s = va_arg(ap, const char *);
			size_t blen = va_arg(ap, size_t);

			if (o)
				sluice_redis__resp_arg(o, s, blen);
		} else if (o && len) {
			sluice_redis__resp_arg(o, p, len);
		}
		n += len != 0;
		p += len;
		while (*p == ' ')
			p++;
	}
	return n;
}

int sluice_redis__command(sluice_redis_link_t *l, sluice_redis_reply_fn *fn,
			  void *priv, const char *fmt, ...)
{
	sluice_redis_resp_t o;
	va_list ap;
	int rc;

	sluice_redis__resp_init(&o);
	va_start(ap, fmt);
	sluice_redis__resp_array(&o, each_arg(fmt, ap, NULL));
	va_end(ap);
	va_start(ap, fmt);
	each_arg(fmt, ap, &o);
	va_end(ap);
	rc = o.failed ? -1 : sluice_redis__link_send(l, fn, priv, o.buf, o.len);
	sluice_redis__resp_free(&o);
	return rc;
}

/* ------------------------------------------------------ a call's items */

int sluice_redis__check_item(const sluice_redis_t *r, const void *key,
			     size_t keylen, const sluice_limit_t *limits,
			     size_t nlimits)
{
	size_t i;

	if (nlimits == 0 || nlimits > SLUICE_MAX_LIMITS || !limits ||
	    keylen > 65535 || (keylen && !key))
		return SLUICE_EINVAL;
	for (i = 0; i < nlimits; i++)
		if (!sluice_limit_valid(&limits[i]))
			return SLUICE_EINVAL;
	/* "{}" is no hash tag: the limits of an empty key (or one starting
	 * with '}') would land on different cluster slots. */
	if (r->cluster && nlimits > 1 &&
	    (keylen == 0 || ((const char *)key)[0] == '}'))
		return SLUICE_EINVAL;
	return 0;
}
