/*
 * log.c -- timestamped single-line messages on stderr, as text or JSON.
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_json;
static _Atomic int log_level = SLUICE_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void sluice_log_configure(int json, sluice_log_level_t level)
{
	atomic_store(&log_json, json);
	atomic_store(&log_level, (int)level);
}

/* Appends s to line[*n..cap) as the inside of a JSON string. */
static void json_escape(char *line, size_t *n, size_t cap, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	for (; *s && *n + 7 < cap; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\') {
			line[(*n)++] = '\\';
			line[(*n)++] = (char)ch;
		} else if (ch < 0x20 || ch == 0x7f) {
			/* \u00XX: control characters (a newline a message
			 * quotes stays inside its one line). */
			memcpy(line + *n, "\\u00", 4);
			line[*n + 4] = hex[ch >> 4];
			line[*n + 5] = hex[ch & 15];
			*n += 6;
		} else {
			line[(*n)++] = (char)ch;
		}
	}
}

static void vlog(sluice_log_level_t level, const char *fmt, va_list ap)
{
	char line[1024], msg[1024], ts[40];
	struct timeval tv;
	struct tm tm;
	size_t n;
	int r;

	if ((int)level < atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", (long)(tv.tv_usec / 1000));
	if (vsnprintf(msg, sizeof(msg), fmt, ap) < 0)
		msg[0] = '\0';
	if (atomic_load_explicit(&log_json, memory_order_relaxed)) {
		r = snprintf(line, sizeof(line),
			     "{\"@timestamp\":\"%s\",\"level\":\"%s\","
			     "\"@message\":\"",
			     ts, level_names[level]);
		n = r > 0 ? (size_t)r : 0;
		json_escape(line, &n, sizeof(line) - 3, msg);
		line[n++] = '"';
		line[n++] = '}';
	} else {
		r = snprintf(line, sizeof(line), "%s %s %s", ts,
			     level_names[level], msg);
		n = r > 0 ? (size_t)r : 0;
		if (n > sizeof(line) - 2)
			n = sizeof(line) - 2;
		/* A message must stay one line, whatever it quotes. */
		for (size_t i = 0; i < n; i++)
			if (line[i] == '\n' || line[i] == '\r')
				line[i] = ' ';
	}
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* nowhere left to report it */
	}
}

#define LOG_FN(name, level)                                                    \
	void name(const char *fmt, ...)                                        \
	{                                                                      \
		va_list ap;                                                    \
                                                                               \
		va_start(ap, fmt);                                             \
		vlog(level, fmt, ap);                                          \
		va_end(ap);                                                    \
	}

LOG_FN(sluice_log_debug, SLUICE_LOG_DEBUG)
LOG_FN(sluice_log_info, SLUICE_LOG_INFO)
LOG_FN(sluice_log_warn, SLUICE_LOG_WARN)
LOG_FN(sluice_log_error, SLUICE_LOG_ERROR)
