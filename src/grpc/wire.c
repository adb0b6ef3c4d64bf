/*
 * wire.c -- a look at a message's wire bytes for what protobuf-c hides.
 *
 * protobuf-c hands a `string` field as a C string: a value with a NUL
 * inside ends at the NUL, so "a\0x" and "a\0y" would both read "a" and
 * share its bucket.  envoyproxy/ratelimit (Go) keeps the whole value; the
 * RLS engine's API is NUL-terminated strings.  So the front end refuses
 * such a value: before the engine sees a request, its string fields are
 * found on the wire and checked here.  The message has already been
 * unpacked by protobuf-c, so it is well-formed; this walk only has to
 * find the fields, and gives up (no NUL found) on anything unexpected.
 */
#include "grpc/internal.h"

#include <string.h>

/* Reads a varint; returns the bytes it took, 0 when malformed. */
static size_t varint(const uint8_t *p, size_t n, uint64_t *v)
{
	size_t i;

	*v = 0;
	for (i = 0; i < n && i < 10; i++) {
		*v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80))
			return i + 1;
	}
	return 0;
}

int grpc_wire_has_nul(const uint8_t *p, size_t n, const grpc_wire_msg_t *m)
{
	while (n > 0) {
		uint64_t tag, len;
		uint32_t field;
		size_t k = varint(p, n, &tag), i;

		if (!k)
			return 0;
		p += k;
		n -= k;
		field = (uint32_t)(tag >> 3);
		switch (tag & 7) {
		case 0: /* varint */
			if (!(k = varint(p, n, &len)))
				return 0;
			break;
		case 1: /* 64 bits */
			k = 8;
			break;
		case 5: /* 32 bits */
			k = 4;
			break;
		case 2: /* length-delimited */
			if (!(k = varint(p, n, &len)) || len > n - k)
				return 0;
			p += k;
			n -= k;
			k = (size_t)len;
			if (field < 32 && (m->strings & (1u << field)) &&
			    memchr(p, 0, k))
				return 1;
			for (i = 0; i < GRPC_WIRE_SUBS && m->subs[i].msg; i++)
				if (m->subs[i].field == field &&
				    grpc_wire_has_nul(p, k, m->subs[i].msg))
					return 1;
			break;
		default: /* groups: not in our messages */
			return 0;
		}
		if (k > n)
			return 0;
		p += k;
		n -= k;
	}
	return 0;
}
