/*
 * accesslog.c -- see accesslog.h.  A log line is not HTTP: nginx has
 * already escaped it (quotes inside fields become \x22), so fields are
 * split on spaces, brackets and quotes.
 */
#include "sim/accesslog.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
				     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

/* Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm), so
 * that no time zone or locale of this machine is involved. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	int64_t era;
	unsigned yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = (unsigned)(y - era * 400);
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

static int digits(const char **p, int n, int *v)
{
	int i, x = 0;

	for (i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return -1;
		x = x * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*v = x;
	return 0;
}

/* "10/Oct/2026:13:55:36[.frac] +0000" */
static int parse_time(const char *s, int64_t *us, int *has_fraction)
{
	int day, year, hh, mm, ss, zh, zm, sign, mon = -1, i;
	int64_t frac = 0, scale = 100000;

	if (digits(&s, 2, &day) || *s++ != '/')
		return -1;
	for (i = 0; i < 12; i++)
		if (strncmp(s, months[i], 3) == 0)
			mon = i;
	if (mon < 0 || s[3] != '/')
		return -1;
	s += 4;
	if (digits(&s, 4, &year) || *s++ != ':' || digits(&s, 2, &hh) ||
	    *s++ != ':' || digits(&s, 2, &mm) || *s++ != ':' ||
	    digits(&s, 2, &ss))
		return -1;
	*has_fraction = 0;
	if (*s == '.') {
		*has_fraction = 1;
		for (s++; isdigit((unsigned char)*s); s++) {
			frac += (*s - '0') * scale;
			scale /= 10;
		}
	}
	if (*s++ != ' ' || (*s != '+' && *s != '-'))
		return -1;
	sign = *s++ == '-' ? -1 : 1;
	if (digits(&s, 2, &zh) || digits(&s, 2, &zm) || *s)
		return -1;
	if (day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60)
		return -1;
	*us = ((days_from_civil(year, (unsigned)mon + 1, (unsigned)day) *
			86400 +
		hh * 3600 + mm * 60 + ss - sign * (zh * 3600 + zm * 60)) *
	       1000000) +
	      frac;
	return 0;
}

/* Cuts the next space-separated token; NULL at the end of the line. */
static char *token(char **p)
{
	char *s = *p, *t;

	while (*s == ' ')
		s++;
	if (!*s)
		return NULL;
	t = s;
	while (*s && *s != ' ')
		s++;
	if (*s)
		*s++ = '\0';
	*p = s;
	return t;
}

/* Cuts the next field delimited by open/close (e.g. '[' ']', '"' '"'). */
static char *delimited(char **p, char open, char close)
{
	char *s = *p, *e;

	while (*s == ' ')
		s++;
	if (*s != open)
		return NULL;
	e = strchr(s + 1, close);
	if (!e)
		return NULL;
	*e = '\0';
	*p = e + 1;
	return s + 1;
}

static int parse_addr(const char *a, struct sockaddr_storage *ss)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, a, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, a, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		return 0;
	}
	return -1;
}

/* "GET /path?q HTTP/1.1" (or HTTP/0.9 "GET /path"). */
static int parse_request(char *req, sluice_logline_t *out)
{
	char *p = req, *m = token(&p), *uri = token(&p), *proto = token(&p);
	char *q;
	const char *c;

	if (!m || !uri || token(&p))
		return -1;
	if (proto && strncmp(proto, "HTTP/", 5) != 0)
		return -1;
	for (c = m; *c; c++)
		if (!isupper((unsigned char)*c) && *c != '-' && *c != '_')
			return -1;
	/* Absolute form: keep the path only. */
	if (strncmp(uri, "http://", 7) == 0 ||
	    strncmp(uri, "https://", 8) == 0) {
		char *slash = strchr(strstr(uri, "//") + 2, '/');

		if (!slash)
			return -1;
		uri = slash;
	}
	if (uri[0] != '/' && strcmp(uri, "*") != 0)
		return -1;
	q = strchr(uri, '?');
	if (q)
		*q = '\0';
	out->method = m;
	out->path = uri;
	return 0;
}

static const char *dash_is_null(const char *s)
{
	return s && strcmp(s, "-") != 0 ? s : NULL;
}

int sluice_logline_parse(char *line, sluice_logline_t *out, const char **why)
{
	char *p = line, *addr, *time, *req, *status, *bytes;
	int i;

	memset(out, 0, sizeof(*out));
	addr = token(&p);
	if (!addr || parse_addr(addr, &out->peer) < 0) {
		*why = "no client address";
		return -1;
	}
	out->addr = addr;
	/* "-" and $remote_user */
	if (!token(&p) || !token(&p)) {
		*why = "truncated before [time]";
		return -1;
	}
	time = delimited(&p, '[', ']');
	if (!time || parse_time(time, &out->time_us, &out->has_fraction) < 0) {
		*why = "bad [time_local]";
		return -1;
	}
	req = delimited(&p, '"', '"');
	if (!req || parse_request(req, out) < 0) {
		*why = "bad \"request\" line";
		return -1;
	}
	status = token(&p);
	bytes = token(&p);
	if (!status || strlen(status) != 3 || !bytes) {
		*why = "no status and bytes";
		return -1;
	}
	for (i = 0; i < 3; i++)
		if (!isdigit((unsigned char)status[i])) {
			*why = "bad status";
			return -1;
		}
	out->status = atoi(status);
	/* combined adds "referer" "agent"; common stops here. */
	out->referer = dash_is_null(delimited(&p, '"', '"'));
	if (out->referer || *p)
		out->agent = dash_is_null(delimited(&p, '"', '"'));
	return 0;
}
