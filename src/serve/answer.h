/*
 * answer.h -- what the endpoints (handlers.c, json_api.c, admin.c,
 * rls_json.c) share to answer a request (answer.c).  The connection's own
 * sluice_resp_begin/end/error are in http_conn.h.
 */
#ifndef SLUICE_SERVE_ANSWER_H
#define SLUICE_SERVE_ANSWER_H

#include "serve/http_conn.h"

/* A sluice_take_t for one request (cached per thread). */
sluice_take_t *sluice_take_get(sluice_svc_t *svc);
void sluice_take_put(sluice_svc_t *svc, sluice_take_t *t);

/* Counts the outcome of every matched rule in the thread's metrics. */
void sluice_count_verdict(sluice_conn_t *c, const sluice_take_t *t);

/* Appends the rate-limit header lines for a verdict (nothing when no rule
 * produced a decision). */
void sluice_verdict_headers(sluice_conn_t *c, const sluice_take_t *t,
			    const sluice_verdict_t *v);

/* The 503 answer when a fail-closed rule's store failed. */
void sluice_resp_store_error(sluice_conn_t *c);

/* 405 with an Allow header listing `allow` ("POST", "GET, HEAD"). */
void sluice_resp_method_not_allowed(sluice_conn_t *c, const char *allow);

/* A JSON body as it is, with a status. */
void sluice_resp_json(sluice_conn_t *c, int status, const char *text);
void sluice_resp_json_len(sluice_conn_t *c, int status, const char *text,
			  size_t len);

#endif /* SLUICE_SERVE_ANSWER_H */
