/*
 * answer.h -- the HTTP answers the endpoints (handlers.c, json_api.c,
 * admin.c, rls_json.c) share (answer.c).  The connection's own
 * sluice_resp_begin/end/error are in http_conn.h; a request's decision,
 * its rate-limit headers and refusal body in policy/request.h.
 */
#ifndef SLUICE_SERVE_ANSWER_H
#define SLUICE_SERVE_ANSWER_H

#include "serve/http_conn.h"

/* The 503 answer when a fail-closed rule's store failed. */
void sluice_resp_store_error(sluice_conn_t *c);

/* 405 with an Allow header listing `allow` ("POST", "GET, HEAD"). */
void sluice_resp_method_not_allowed(sluice_conn_t *c, const char *allow);

/* A JSON body as it is, with a status. */
void sluice_resp_json(sluice_conn_t *c, int status, const char *text);
void sluice_resp_json_len(sluice_conn_t *c, int status, const char *text,
			  size_t len);

#endif /* SLUICE_SERVE_ANSWER_H */
