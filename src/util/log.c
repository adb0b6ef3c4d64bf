/*
 * log.c -- timestamped single-line messages on stderr.
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static void vlog(const char *level, const char *fmt, va_list ap)
{
	char line[1024];
	struct timeval tv;
	struct tm tm;
	size_t n;
	int r;

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	r = snprintf(line + n, sizeof(line) - n, ".%03ldZ %s ",
		     (long)(tv.tv_usec / 1000), level);
	if (r > 0)
		n += (size_t)r;
	r = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (r > 0)
		n += (size_t)r;
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	/* A message must stay one line, whatever it quotes. */
	for (size_t i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* nowhere left to report it */
	}
}

void sluice_log_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog("info", fmt, ap);
	va_end(ap);
}

void sluice_log_warn(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog("warn", fmt, ap);
	va_end(ap);
}

void sluice_log_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog("error", fmt, ap);
	va_end(ap);
}
