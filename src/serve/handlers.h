/*
 * handlers.h -- the endpoints of `sluice serve`: the rows of routes[] in
 * handlers.c, the one list of them (the 404 message's list is read from
 * it; docs/HTTP.md describes each), with their functions there and in
 * json_api.c (POST /v1/take), admin.c (the admin endpoints) and
 * rls_json.c (Envoy's /json and /healthcheck).
 */
#ifndef SLUICE_SERVE_HANDLERS_H
#define SLUICE_SERVE_HANDLERS_H

#include "serve/http_conn.h"

#include <jansson.h>

/* Answers the request just received on c (now, or later through the
 * backend's callback). */
void sluice_handle(sluice_conn_t *c);

/* POST /v1/take (json_api.c). */
void sluice_api_take(sluice_conn_t *c);

/* The JSON body of a POST as an object, or NULL after answering 400
 * (json_api.c); the caller json_decref()s it. */
json_t *sluice_api_object(sluice_conn_t *c);

/* The configured rule named name[0..len) (a JSON string, which may hold a
 * NUL: then no rule has that name), or NULL after answering 400. */
const sluice_rule_t *sluice_api_rule(sluice_conn_t *c,
				     const sluice_config_t *cfg,
				     const char *name, size_t len);

/* Its "key": 1 to 400 bytes, or NULL after answering 400. */
const char *sluice_api_key(sluice_conn_t *c, json_t *obj, size_t *keylen);

/* An ad-hoc limit from "capacity" and "rate" (a string such as "2/s" or a
 * number per second): 0, or -1 after answering 400 naming the field. */
int sluice_api_limit(sluice_conn_t *c, json_t *obj, sluice_limit_t *out);

/* envoyproxy/ratelimit's POST /json and GET /healthcheck (rls_json.c). */
void sluice_rls_json(sluice_conn_t *c);
void sluice_rls_healthcheck(sluice_conn_t *c);

/* POST /v1/reset, /v1/refund and /v1/set (admin.c): the verb. */
enum { SLUICE_ADMIN_RESET, SLUICE_ADMIN_REFUND, SLUICE_ADMIN_SET };
void sluice_api_admin(sluice_conn_t *c, int verb);
/* GET /rlconfig (admin): the loaded envoy limits, one line each, as
 * envoyproxy/ratelimit's debug page lists them. */
void sluice_api_rlconfig(sluice_conn_t *c);

#endif /* SLUICE_SERVE_HANDLERS_H */
