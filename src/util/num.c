/*
 * num.c -- integer helpers (num.h).
 */
#include "util/num.h"

#include <string.h>

size_t sluice_u64_dec(char *out, uint64_t v)
{
	char tmp[20], *end = tmp + sizeof(tmp), *q = end;

	do {
		*--q = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	memcpy(out, q, (size_t)(end - q));
	return (size_t)(end - q);
}
