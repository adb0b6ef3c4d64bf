/* Temporary stand-in for src/envoy/rls.c: every descriptor OK with the
 * override limit echoed.  Only linked while src/envoy/rls.c is absent. */
#include "envoy/rls.h"
#include "serve/svc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sluice_rls_decide(struct sluice_svc_s *svc, const sluice_rls_request_t *req,
		      sluice_rls_cb cb, void *arg, char *errbuf, size_t errlen)
{
	sluice_rls_response_t *r = calloc(1, sizeof(*r));
	size_t i;

	if (!req->domain[0]) {
		free(r);
		snprintf(errbuf, errlen, "rate limit domain must not be empty");
		return -1;
	}
	r->overall_code = SLUICE_RLS_CODE_OK;
	r->statuses = calloc(req->ndescriptors + 1, sizeof(*r->statuses));
	r->nstatuses = req->ndescriptors;
	for (i = 0; i < req->ndescriptors; i++) {
		r->statuses[i].code = SLUICE_RLS_CODE_OK;
		if (req->descriptors[i].has_limit) {
			r->statuses[i].has_limit = 1;
			r->statuses[i].requests_per_unit =
				req->descriptors[i].limit_requests_per_unit;
			r->statuses[i].unit = req->descriptors[i].limit_unit;
			r->statuses[i].limit_remaining =
				req->descriptors[i].limit_requests_per_unit - 1;
			r->statuses[i].duration_until_reset_ms = 1500;
		}
	}
	cb(arg, r);
	return 0;
}

void sluice_rls_response_free(sluice_rls_response_t *resp)
{
	free(resp->statuses);
	free(resp);
}

int sluice_rls_healthy(struct sluice_svc_s *svc)
{
	return 1;
}
