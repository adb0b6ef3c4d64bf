/*
 * rules_test.h -- what the rule tests share: a request made of a method,
 * a path, a peer and headers (every line of a header offered as the HTTP
 * layer offers them), a config loaded from text, and what it matched.
 */
#ifndef SLUICE_TESTS_RULES_TEST_H
#define SLUICE_TESTS_RULES_TEST_H

#include "check.h"
#include "policy/config/config.h"
#include "util/addr.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct hdr_s {
	const char *name, *value;
} hdr_t;

typedef struct req_s {
	sluice_request_t r;
	hdr_t hdrs[8];
	struct sockaddr_storage peer;
} req_t;

static inline const char *lookup(void *ctx, const char *name, size_t *len)
{
	hdr_t *h = ctx;

	for (; h->name; h++)
		if (strcasecmp(h->name, name) == 0) {
			*len = strlen(h->value);
			return h->value;
		}
	return NULL;
}

/* Every line of a header, as the HTTP layer offers them. */
static inline const char *lookup_line(void *ctx, const char *name, size_t index,
				      size_t *len)
{
	hdr_t *h = ctx;

	for (; h->name; h++)
		if (strcasecmp(h->name, name) == 0 && index-- == 0) {
			*len = strlen(h->value);
			return h->value;
		}
	return NULL;
}

/* A request from `peer` ("1.2.3.4" or an IPv6 address) with headers given
 * as name, value pairs ending with NULL. */
static inline req_t *mkreq(req_t *q, const char *method, const char *path,
			   const char *peer, ...)
{
	va_list ap;
	size_t n = 0;
	const char *name;

	memset(q, 0, sizeof(*q));
	va_start(ap, peer);
	while ((name = va_arg(ap, const char *)) && n < 7) {
		q->hdrs[n].name = name;
		q->hdrs[n].value = va_arg(ap, const char *);
		n++;
	}
	va_end(ap);
	if (strchr(peer, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&q->peer;

		s6->sin6_family = AF_INET6;
		inet_pton(AF_INET6, peer, &s6->sin6_addr);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&q->peer;

		s4->sin_family = AF_INET;
		inet_pton(AF_INET, peer, &s4->sin_addr);
	}
	q->r.method = method;
	q->r.method_len = strlen(method);
	q->r.path = path;
	q->r.path_len = strlen(path);
	q->r.header = lookup;
	q->r.header_line = lookup_line;
	q->r.header_ctx = q->hdrs;
	q->r.peer = (struct sockaddr *)&q->peer;
	return q;
}

static inline sluice_config_t *load(const char *text)
{
	char err[512];
	sluice_config_t *c = sluice_config_parse("t.yaml", text, strlen(text),
						 err, sizeof(err));

	if (!c) {
		fprintf(stderr, "config: %s\n", err);
		exit(1);
	}
	return c;
}

static inline int key_is(const sluice_match_t *m, const char *rule,
			 const char *id)
{
	char want[600];
	int n = snprintf(want, sizeof(want), "%s\x1f%s", rule, id);

	return m->keylen == (size_t)n && memcmp(m->key, want, (size_t)n) == 0 &&
	       m->key[n] == '\0';
}

static inline const char *client_ip(const sluice_config_t *c, req_t *q)
{
	static char buf[64];

	sluice_client_ip(c, &q->r, buf, sizeof(buf));
	return buf;
}

#endif /* SLUICE_TESTS_RULES_TEST_H */
