/*
 * answer.c -- what the endpoints share to answer: the per-thread take,
 * counting a verdict, its rate-limit headers, and the common answers.
 */
#include "serve/answer.h"

#include <assert.h>
#include <string.h>

sluice_take_t *sluice_take_get(sluice_svc_t *svc)
{
	sluice_take_t *t = svc->spare;

	if (t) {
		svc->spare = NULL;
		return t;
	}
	return sluice_take_new();
}

void sluice_take_put(sluice_svc_t *svc, sluice_take_t *t)
{
	/* Put back once, with its verdict delivered. */
	assert(t && t != svc->spare && t->pending == 0);
	if (!svc->spare)
		svc->spare = t;
	else
		sluice_take_free(t);
}

void sluice_count_verdict(sluice_conn_t *c, const sluice_take_t *t)
{
	sluice_metrics_t *m = c->svc->metrics;
	size_t i;

	for (i = 0; i < t->nmatches; i++) {
		const sluice_match_result_t *r = &t->results[i];
		const sluice_rule_t *rule = t->matches[i].rule;
		size_t slot =
			rule == &t->scratch_rule
				? SLUICE_METRIC_ADHOC
				: c->req_live->slots[sluice_live_rule_index(
					  c->req_live, rule)];

		assert(slot < SLUICE_METRIC_SLOTS);
		if (r->store_err)
			sluice_count(&m->store_errors[slot], 1);
		switch (r->outcome) {
		case SLUICE_OUT_ALLOWED:
			sluice_count(&m->decisions[slot][SLUICE_RESULT_ALLOWED],
				     1);
			break;
		case SLUICE_OUT_LIMITED:
			sluice_count(&m->decisions[slot][SLUICE_RESULT_LIMITED],
				     1);
			if (rule->shadow)
				sluice_count(&m->shadow_rejections[slot], 1);
			break;
		case SLUICE_OUT_ERROR_OPEN:
		case SLUICE_OUT_ERROR_CLOSED:
			sluice_count(&m->decisions[slot][SLUICE_RESULT_ERROR],
				     1);
			break;
		case SLUICE_OUT_SKIPPED:
			break;
		}
	}
}

void sluice_verdict_headers(sluice_conn_t *c, const sluice_take_t *t,
			    const sluice_verdict_t *v)
{
	sluice_verdict_header_lines(&c->out, t, v);
}

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
