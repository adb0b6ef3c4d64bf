/*
 * buf.h -- a growable byte buffer for request and response bytes.
 *
 * Allocation failure does not abort: the buffer remembers it in `oom`, later
 * appends become no-ops, and the connection that owns it closes instead of
 * answering with a truncated message.
 */
#ifndef SLUICE_UTIL_BUF_H
#define SLUICE_UTIL_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/log.h"

typedef struct sluice_buf_s {
	char *data;
	size_t len;
	size_t cap;
	int oom;
} sluice_buf_t;

/* Makes room for n more bytes; returns 0 or -1 (and sets oom). */
int sluice_buf_reserve(sluice_buf_t *b, size_t n);
void sluice_buf_append_slow(sluice_buf_t *b, const void *p, size_t n);

/* Answers are built from many small pieces: keep the common case (room
 * left) inline. */
static inline void sluice_buf_append(sluice_buf_t *b, const void *p, size_t n)
{
	if (b->cap - b->len >= n && n) {
		memcpy(b->data + b->len, p, n);
		b->len += n;
	} else {
		sluice_buf_append_slow(b, p, n);
	}
}

static inline void sluice_buf_puts(sluice_buf_t *b, const char *s)
{
	sluice_buf_append(b, s, strlen(s));
}
void sluice_buf_u64(sluice_buf_t *b, uint64_t v);
void sluice_buf_printf(sluice_buf_t *b, const char *fmt, ...)
	SLUICE_PRINTF(2, 3);
/* Appends s as a Prometheus label value: backslash, quote and newline
 * escaped (no quotes added). */
void sluice_buf_label(sluice_buf_t *b, const char *s);
/* Appends s as the inside of a JSON string (no quotes added). */
void sluice_buf_json_str(sluice_buf_t *b, const char *s, size_t n);
/* Drops the first n bytes. */
void sluice_buf_consume(sluice_buf_t *b, size_t n);
void sluice_buf_free(sluice_buf_t *b);

#endif /* SLUICE_UTIL_BUF_H */
