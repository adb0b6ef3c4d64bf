/*
 * buf.c -- growable byte buffers.
 */
#include "util/buf.h"
#include "util/num.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sluice_buf_reserve(sluice_buf_t *b, size_t n)
{
	size_t cap;
	char *p;

	if (b->oom)
		return -1;
	if (b->cap - b->len >= n)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap - b->len < n) {
		if (cap > SIZE_MAX / 2) {
			b->oom = 1;
			return -1;
		}
		cap *= 2;
	}
	p = realloc(b->data, cap);
	if (!p) {
		b->oom = 1;
		return -1;
	}
	b->data = p;
	b->cap = cap;
	return 0;
}

void sluice_buf_append_slow(sluice_buf_t *b, const void *p, size_t n)
{
	if (n == 0 || sluice_buf_reserve(b, n) < 0)
		return;
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

void sluice_buf_u64(sluice_buf_t *b, uint64_t v)
{
	char tmp[20];

	sluice_buf_append(b, tmp, sluice_u64_dec(tmp, v));
}

void sluice_buf_printf(sluice_buf_t *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n <= 0 || sluice_buf_reserve(b, (size_t)n + 1) < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void sluice_buf_label(sluice_buf_t *b, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			sluice_buf_append(b, "\\", 1);
		if (*s == '\n')
			sluice_buf_puts(b, "\\n");
		else
			sluice_buf_append(b, s, 1);
	}
}

void sluice_buf_json_str(sluice_buf_t *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[6] = {'\\', 'u', '0', '0', 0, 0};

		if (c == '"' || c == '\\') {
			esc[1] = (char)c;
			sluice_buf_append(b, esc, 2);
		} else if (c < 0x20 || c == 0x7f) {
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			sluice_buf_append(b, esc, 6);
		} else {
			sluice_buf_append(b, &s[i], 1);
		}
	}
}

void sluice_buf_consume(sluice_buf_t *b, size_t n)
{
	if (n >= b->len) {
		b->len = 0;
		return;
	}
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
}

void sluice_buf_free(sluice_buf_t *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}
