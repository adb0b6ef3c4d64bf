/*
 * accesslog.h -- one line of an nginx access log.
 *
 * Understands the default `combined` format
 *
 *   $remote_addr - $remote_user [$time_local] "$request" $status
 *   $body_bytes_sent "$http_referer" "$http_user_agent"
 *
 * and its usual variants: `common` (no referer and user agent), and any
 * trailing fields after the user agent ($request_time, "$http_x_forwarded_for",
 * upstream timings), which are ignored.  $time_local may carry a fraction
 * of a second ("10/Oct/2026:13:55:36.250 +0000").
 */
#ifndef SLUICE_SIM_ACCESSLOG_H
#define SLUICE_SIM_ACCESSLOG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Fields point into the parsed line (which the parser modifies). */
typedef struct sluice_logline_s {
	const char *addr; /* remote_addr as text */
	struct sockaddr_storage peer;
	int64_t time_us;  /* Unix time */
	int has_fraction; /* time_local had sub-second digits */
	const char *method;
	const char *path;    /* without the query string */
	const char *referer; /* NULL when "-" or absent */
	const char *agent;   /* NULL when "-" or absent */
	int status;
} sluice_logline_t;

/*
 * Parses one line (without its newline) in place.  Returns 0, or -1 with a
 * short reason ("no [time]", "bad request line") in *why.
 */
int sluice_logline_parse(char *line, sluice_logline_t *out, const char **why);

#endif /* SLUICE_SIM_ACCESSLOG_H */
