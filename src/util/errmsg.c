/*
 * errmsg.c -- error messages into the caller's buffer (errmsg.h).
 */
#include "util/errmsg.h"

#include <stdarg.h>
#include <stdio.h>

int sluice_fail(int code, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}
