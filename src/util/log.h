/*
 * log.h -- one line per event on stderr.
 *
 * Every line starts with an ISO-8601 UTC timestamp and a level, so that
 * `sluice serve 2>&1 | grep` and journald both read it well.  Lines are
 * written with a single write(2), so lines from different threads never
 * interleave.
 */
#ifndef SLUICE_UTIL_LOG_H
#define SLUICE_UTIL_LOG_H

#if defined(__GNUC__)
#define SLUICE_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define SLUICE_PRINTF(a, b)
#endif

void sluice_log_info(const char *fmt, ...) SLUICE_PRINTF(1, 2);
void sluice_log_warn(const char *fmt, ...) SLUICE_PRINTF(1, 2);
void sluice_log_error(const char *fmt, ...) SLUICE_PRINTF(1, 2);

#endif /* SLUICE_UTIL_LOG_H */
