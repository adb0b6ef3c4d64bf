/*
 * answer.c -- the HTTP answers the endpoints share (the decision and its
 * headers come from the policy engine, policy/request.h).
 */
#include "serve/answer.h"

#include <string.h>

void sluice_resp_store_error(sluice_conn_t *c)
{
	static const char body[] =
		"{\"error\":\"store_unavailable\",\"message\":\"the rate-limit "
		"store failed and the rule fails closed\"}";

	sluice_resp_begin(c, 503);
	sluice_buf_puts(&c->out, "Retry-After: 1\r\n");
	sluice_resp_end(c, "application/json", body, sizeof(body) - 1);
}

void sluice_resp_method_not_allowed(sluice_conn_t *c, const char *allow)
{
	static const char body[] =
		"{\"error\":\"method_not_allowed\",\"message\":\"see the Allow "
		"header\"}";

	sluice_resp_begin(c, 405);
	sluice_buf_puts(&c->out, "Allow: ");
	sluice_buf_puts(&c->out, allow);
	sluice_buf_append(&c->out, "\r\n", 2);
	sluice_resp_end(c, "application/json", body, sizeof(body) - 1);
}

void sluice_resp_json_len(sluice_conn_t *c, int status, const char *text,
			  size_t len)
{
	sluice_resp_begin(c, status);
	sluice_resp_end(c, "application/json", text, len);
}

void sluice_resp_json(sluice_conn_t *c, int status, const char *text)
{
	sluice_resp_json_len(c, status, text, strlen(text));
}
