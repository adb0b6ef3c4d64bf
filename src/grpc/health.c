/*
 * health.c -- grpc.health.v1.Health, Check and Watch, for "" (the
 * server) and "ratelimit" or the RLS service's full name: SERVING while
 * the store can answer and the server is not draining (SIGTERM),
 * NOT_SERVING otherwise.
 *
 * Check answers once; another service name is NOT_FOUND.  Watch streams:
 * the status now, then a message each time it changes (looked at every
 * sweep, at most a second apart, and at once at the drain); another
 * service name gets SERVICE_UNKNOWN and stays watched, as the health
 * protocol asks.  At the drain a watch gets NOT_SERVING and then ends
 * (UNAVAILABLE), so that it does not hold the drain up.
 */
#include "grpc/internal.h"
#include "policy/envoy/rls.h"
#include "proto/grpc/health/v1/health.pb-c.h"

#include <string.h>

#define SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define NOT_SERVING                                                            \
	GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
#define SERVICE_UNKNOWN                                                        \
	GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN

/* HealthCheckRequest.service (1) is a string: one with a NUL inside is
 * not a name we know, whatever its prefix. */
static const grpc_wire_msg_t wire_request = {1u << 1, {{0}}};

/* 1: a service we answer for; 0: unknown; -1: the message is malformed. */
static int parse(const uint8_t *msg, size_t len)
{
	Grpc__Health__V1__HealthCheckRequest *req;
	int known;

	req = grpc__health__v1__health_check_request__unpack(NULL, len, msg);
	if (!req)
		return -1;
	known = !grpc_wire_has_nul(msg, len, &wire_request) &&
		(!req->service[0] || strcmp(req->service, "ratelimit") == 0 ||
		 strcmp(req->service,
			"envoy.service.ratelimit.v3.RateLimitService") == 0);
	grpc__health__v1__health_check_request__free_unpacked(req, NULL);
	return known;
}

static int status_now(grpc_call_t *call)
{
	sluice_svc_t *svc = grpc_call_svc(call);

	return !svc->draining && sluice_rls_healthy(svc) ? SERVING
							 : NOT_SERVING;
}

void grpc_health_check(grpc_call_t *call, const uint8_t *msg, size_t len)
{
	Grpc__Health__V1__HealthCheckResponse resp =
		GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
	int known = parse(msg, len);

	if (known < 0) {
		grpc_call_fail(call, GRPC_INVALID_ARGUMENT,
			       "the HealthCheckRequest message does not parse");
		return;
	}
	if (!known) {
		grpc_call_fail(call, GRPC_NOT_FOUND, "unknown service");
		return;
	}
	resp.status = status_now(call);
	grpc_call_reply(call, &resp.base);
}

/* Sends status when it is not the one last sent (the call's tag). */
static void send_status(grpc_call_t *call, int status)
{
	Grpc__Health__V1__HealthCheckResponse resp =
		GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;

	if (grpc_call_tag(call) == status + 1)
		return;
	grpc_call_set_tag(call, status + 1);
	resp.status = status;
	grpc_call_send(call, &resp.base);
}

void grpc_health_watch(grpc_call_t *call, const uint8_t *msg, size_t len)
{
	int known = parse(msg, len);

	if (known < 0) {
		grpc_call_fail(call, GRPC_INVALID_ARGUMENT,
			       "the HealthCheckRequest message does not parse");
		return;
	}
	if (!known) {
		/* The tag 0 says: unknown, nothing more will change. */
		send_status(call, SERVICE_UNKNOWN);
		grpc_call_set_tag(call, 0);
		return;
	}
	send_status(call, status_now(call));
}

void grpc_health_watch_update(grpc_call_t *call)
{
	if (grpc_call_tag(call) == 0) {
		if (grpc_call_svc(call)->draining)
			grpc_call_end(call, GRPC_UNAVAILABLE,
				      "the server is shutting down");
		return;
	}
	send_status(call, status_now(call));
	if (grpc_call_svc(call)->draining)
		grpc_call_end(call, GRPC_UNAVAILABLE,
			      "the server is shutting down");
}
