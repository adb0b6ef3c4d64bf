/*
 * errmsg.h -- the "message into the caller's buffer, return the code" idiom
 * of every parser that reports why it refused its input (rates, Redis
 * URLs).  Shared with the Redis module, which is built from sources
 * (CMakeLists.txt adds src/util/errmsg.c to it).
 */
#ifndef SLUICE_UTIL_ERRMSG_H
#define SLUICE_UTIL_ERRMSG_H

#include <stddef.h>

/* Formats the message into err (when err is not NULL and errlen > 0) and
 * returns code, so that a parser can `return sluice_fail(...)`. */
int sluice_fail(int code, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif /* SLUICE_UTIL_ERRMSG_H */
