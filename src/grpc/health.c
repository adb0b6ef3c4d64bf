/*
 * health.c -- grpc.health.v1.Health/Check for "" (the server) and
 * "ratelimit" or the RLS service's full name: SERVING while the store
 * can answer and the server is not draining (SIGTERM), NOT_SERVING
 * otherwise; any other service name is NOT_FOUND, as the health protocol
 * asks.  (Watch, a streaming method, is not offered: UNIMPLEMENTED.)
 */
#include "envoy/rls.h"
#include "grpc/internal.h"
#include "proto/grpc/health/v1/health.pb-c.h"

#include <string.h>

static int known_service(const char *name)
{
	return !name[0] || strcmp(name, "ratelimit") == 0 ||
	       strcmp(name, "envoy.service.ratelimit.v3.RateLimitService") == 0;
}

void grpc_health_check(grpc_call_t *call, const uint8_t *msg, size_t len)
{
	Grpc__Health__V1__HealthCheckRequest *req;
	Grpc__Health__V1__HealthCheckResponse resp =
		GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
	sluice_svc_t *svc = grpc_call_svc(call);
	int known;

	req = grpc__health__v1__health_check_request__unpack(NULL, len, msg);
	if (!req) {
		grpc_call_fail(call, GRPC_INVALID_ARGUMENT,
			       "the HealthCheckRequest message does not parse");
		return;
	}
	known = known_service(req->service);
	grpc__health__v1__health_check_request__free_unpacked(req, NULL);
	if (!known) {
		grpc_call_fail(call, GRPC_NOT_FOUND, "unknown service");
		return;
	}
	resp.status =
		!svc->draining && sluice_rls_healthy(svc)
			? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
			: GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
	grpc_call_reply(call, &resp.base);
}
