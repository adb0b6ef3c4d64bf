/*
 * command.c -- commands in RESP: the arguments of a call (built on the
 * stack, keys in one allocation), the writer that turns them into
 * "*N\r\n$len\r\narg\r\n..." and hands the bytes to a link, and a small
 * formatter for the fixed commands of handshakes and probes.
 *
 * The writer is ours rather than hiredis' redisFormatCommand, which goes
 * through sdscatfmt for every argument: it was the client's largest cost
 * per decision.
 */
#include "store/redis/redis_int.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ arguments */

void sluice_redis__arg(sluice_redis_args_t *a, const char *s, size_t len)
{
	a->argv[a->argc] = s;
	a->len[a->argc++] = len;
}

void sluice_redis__arg_u64(sluice_redis_args_t *a, uint64_t v)
{
	char *buf = a->nums[a->argc];

	sluice_redis__arg(a, buf, sluice_u64_dec(buf, v));
}

/* "<prefix>{<key>}:<limit id>" for every limit (see sluice_limit_id()):
 * a bucket is named by its limit, never by the limit's position. */
int sluice_redis__arg_keys(sluice_redis_args_t *a, const sluice_redis_call_t *c)
{
	size_t i, each = c->keybaselen + SLUICE_LIMIT_ID_MAX, off = 0;

	a->keys = malloc(each * c->nlimits);
	if (!a->keys)
		return -1;
	for (i = 0; i < c->nlimits; i++) {
		char *k = a->keys + off;
		size_t n;

		memcpy(k, c->keybase, c->keybaselen);
		n = sluice_limit_id(&c->limits[i], k + c->keybaselen);
		sluice_redis__arg(a, k, c->keybaselen + n);
		off += each;
	}
	return 0;
}

/* --------------------------------------------------------------- writer */

static char *put_len(char *p, char tag, size_t n)
{
	*p++ = tag;
	p += sluice_u64_dec(p, n);
	*p++ = '\r';
	*p++ = '\n';
	return p;
}

int sluice_redis__command_argv(sluice_redis_link_t *l,
			       sluice_redis_reply_fn *fn, void *priv,
			       const sluice_redis_args_t *a)
{
	char stack[2048], *buf = stack, *p;
	size_t need = 16, i;
	int rc;

	for (i = 0; i < (size_t)a->argc; i++)
		need += a->len[i] + 24;
	if (need > sizeof(stack) && !(buf = malloc(need)))
		return -1;
	p = put_len(buf, '*', (size_t)a->argc);
	for (i = 0; i < (size_t)a->argc; i++) {
		p = put_len(p, '$', a->len[i]);
		memcpy(p, a->argv[i], a->len[i]);
		p += a->len[i];
		*p++ = '\r';
		*p++ = '\n';
	}
	rc = sluice_redis__link_send(l, fn, priv, buf, (size_t)(p - buf));
	if (buf != stack)
		free(buf);
	return rc;
}

/* ------------------------------------------------------------ formatter */

int sluice_redis__command(sluice_redis_link_t *l, sluice_redis_reply_fn *fn,
			  void *priv, const char *fmt, ...)
{
	sluice_redis_args_t a;
	const char *p = fmt;
	va_list ap;

	a.argc = 0;
	va_start(ap, fmt);
	while (*p && a.argc < SLUICE_REDIS_MAX_ARGS) {
		size_t n = strcspn(p, " ");

		if (n == 2 && p[0] == '%' && p[1] == 's') {
			const char *s = va_arg(ap, const char *);

			sluice_redis__arg(&a, s, strlen(s));
		} else if (n == 2 && p[0] == '%' && p[1] == 'd') {
			int v = va_arg(ap, int);
			char *buf = a.nums[a.argc];
			size_t k = 0;

			if (v < 0) {
				buf[k++] = '-';
				k += sluice_u64_dec(buf + k,
						    (uint64_t)0 - (uint64_t)v);
			} else {
				k = sluice_u64_dec(buf, (uint64_t)v);
			}
			sluice_redis__arg(&a, buf, k);
		} else if (n == 2 && p[0] == '%' && p[1] == 'b') {
			const char *s = va_arg(ap, const char *);
			size_t len = va_arg(ap, size_t);

			sluice_redis__arg(&a, s, len);
		} else if (n) {
			sluice_redis__arg(&a, p, n);
		}
		p += n;
		while (*p == ' ')
			p++;
	}
	va_end(ap);
	return sluice_redis__command_argv(l, fn, priv, &a);
}
