/*
 * log.h -- one line per event on stderr.
 *
 * Every line says when (ISO-8601 UTC), how grave, and what.  As text
 * (the default): "2026-12-05T12:00:00.123Z info what happened", which
 * `sluice serve 2>&1 | grep` and journald read well; as JSON (log.format:
 * json), one object a line with envoyproxy/ratelimit's field names
 * (LOG_FORMAT=json), for a log collector:
 *
 *   {"@timestamp":"2026-12-05T12:00:00.123Z","level":"info","@message":"..."}
 *
 * Lines are written with a single write(2), so lines from different
 * threads never interleave.  Lines below the configured level are not
 * written (log.level; info by default).
 */
#ifndef SLUICE_UTIL_LOG_H
#define SLUICE_UTIL_LOG_H

#if defined(__GNUC__)
#define SLUICE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SLUICE_PRINTF(a, b)
#endif

typedef enum {
	SLUICE_LOG_DEBUG = 0,
	SLUICE_LOG_INFO,
	SLUICE_LOG_WARN,
	SLUICE_LOG_ERROR,
} sluice_log_level_t;

/* How lines are written from now on (any thread may log meanwhile):
 * json 0 for text, 1 for JSON; lines below level are dropped. */
void sluice_log_configure(int json, sluice_log_level_t level);

void sluice_log_debug(const char *fmt, ...) SLUICE_PRINTF(1, 2);
void sluice_log_info(const char *fmt, ...) SLUICE_PRINTF(1, 2);
void sluice_log_warn(const char *fmt, ...) SLUICE_PRINTF(1, 2);
void sluice_log_error(const char *fmt, ...) SLUICE_PRINTF(1, 2);

#endif /* SLUICE_UTIL_LOG_H */
