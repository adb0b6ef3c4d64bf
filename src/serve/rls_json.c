/*
 * rls_json.c -- envoyproxy/ratelimit's HTTP side: POST /json and
 * GET /healthcheck.
 *
 * POST /json takes a RateLimitRequest and answers a RateLimitResponse, both
 * in proto3's JSON mapping (lowerCamelCase names in the answer; either
 * spelling accepted in the request, as proto3 JSON parsers do; enums as
 * their names; a Duration as "1.500s"; fields at their default left
 * out).  The status is envoyproxy/ratelimit's: 200 when the overall code
 * is OK, 429 when OVER_LIMIT, 400 for a request it cannot read; sluice
 * adds 503 when the store failed and envoy.on_store_error is closed.
 * The decision itself is the RLS engine's (src/policy/envoy/rls.h), shared with
 * the gRPC front end.
 */
#include "policy/envoy/config.h"
#include "policy/envoy/meta.h"
#include "policy/envoy/rls.h"
#include "serve/answer.h"
#include "serve/handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One request in flight: what the engine borrows until it answers. */
typedef struct json_req_s {
	sluice_conn_t *c;
	json_t *root; /* owns every string the request points to */
	sluice_rls_request_t req;
	sluice_rls_descriptor_t *descs;
	sluice_rls_entry_t *entries;
} json_req_t;

static void json_req_free(json_req_t *j)
{
	json_decref(j->root);
	free(j->descs);
	free(j->entries);
	free(j);
}

/* The member `camel` or `snake` of obj (proto3 JSON accepts both); both
 * at once is an error (*dup set). */
static json_t *field(json_t *obj, const char *camel, const char *snake,
		     int *dup)
{
	json_t *a = json_object_get(obj, camel);
	json_t *b = snake ? json_object_get(obj, snake) : NULL;

	if (a && b)
		*dup = 1;
	return a ? a : b;
}

/* Only these members (either spelling); the first other one is named. */
static const char *unknown_member(json_t *obj, const char *const *known)
{
	const char *k;
	json_t *v;
	size_t i;

	json_object_foreach(obj, k, v)
	{
		for (i = 0; known[i]; i++)
			if (strcmp(k, known[i]) == 0)
				break;
		if (!known[i])
			return k;
	}
	return NULL;
}

/* An integer as proto3 JSON writes one: a number or a decimal string.
 * NULL and JSON null are 0. */
static int uint_value(json_t *v, uint64_t max, uint64_t *out)
{
	const char *s;
	char *end;

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_integer(v)) {
		if (json_integer_value(v) < 0 ||
		    (uint64_t)json_integer_value(v) > max)
			return -1;
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (!json_is_string(v))
		return -1;
	s = json_string_value(v);
	if (!*s || *s < '0' || *s > '9')
		return -1;
	*out = strtoull(s, &end, 10);
	return *end || *out > max ? -1 : 0;
}

static const char *str_value(json_t *v)
{
	if (!v || json_is_null(v))
		return "";
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* RateLimitDescriptor.limit: {requestsPerUnit, unit}. */
static const char *parse_limit(json_t *v, sluice_rls_descriptor_t *d)
{
	static const char *const known[] = {"requestsPerUnit",
					    "requests_per_unit", "unit", NULL};
	json_t *u;
	uint64_t n;
	int dup = 0;

	if (json_is_null(v))
		return NULL;
	if (!json_is_object(v) || unknown_member(v, known))
		return "limit: expected {requestsPerUnit, unit}";
	if (uint_value(field(v, "requestsPerUnit", "requests_per_unit", &dup),
		       UINT32_MAX, &n) < 0 ||
	    dup)
		return "limit.requestsPerUnit: expected a uint32";
	d->has_limit = 1;
	d->limit_requests_per_unit = (uint32_t)n;
	u = json_object_get(v, "unit");
	if (json_is_string(u))
		d->limit_unit = sluice_envoy_unit_parse(json_string_value(u));
	else if (json_is_integer(u) && json_integer_value(u) >= 0 &&
		 json_integer_value(u) <= 7)
		d->limit_unit = (sluice_rls_unit_t)json_integer_value(u);
	else
		return "limit.unit: expected SECOND, MINUTE, HOUR, DAY, WEEK, "
		       "MONTH or YEAR";
	return NULL;
}

static const char *parse_descriptor(json_t *v, sluice_rls_descriptor_t *d,
				    sluice_rls_entry_t *entries, size_t *used)
{
	static const char *const known[] = {"entries", "limit", "hitsAddend",
					    "hits_addend", NULL};
	static const char *const eknown[] = {"key", "value", NULL};
	json_t *es, *e, *h;
	size_t i;
	int dup = 0;
	const char *err;

	if (!json_is_object(v))
		return "descriptors: expected a list of objects";
	if (unknown_member(v, known))
		return "descriptors: unknown field (expected entries, limit, "
		       "hitsAddend)";
	es = json_object_get(v, "entries");
	if (es && !json_is_null(es) && !json_is_array(es))
		return "entries: expected a list";
	d->entries = entries + *used;
	d->nentries = es && json_is_array(es) ? json_array_size(es) : 0;
	json_array_foreach(es, i, e)
	{
		sluice_rls_entry_t *en = &entries[(*used)++];

		if (!json_is_object(e) || unknown_member(e, eknown))
			return "entries: expected objects {key, value}";
		en->key = str_value(json_object_get(e, "key"));
		en->value = str_value(json_object_get(e, "value"));
		if (!en->key || !en->value)
			return "entries: key and value must be strings";
	}
	if ((h = json_object_get(v, "limit")) && (err = parse_limit(h, d)))
		return err;
	h = field(v, "hitsAddend", "hits_addend", &dup);
	if (dup)
		return "hitsAddend: given twice";
	if (h && !json_is_null(h)) {
		if (uint_value(h, UINT64_MAX, &d->hits_addend) < 0)
			return "hitsAddend: expected a uint64";
		d->has_hits_addend = 1;
	}
	return NULL;
}

/* Fills j->req from j->root; NULL, or what is wrong. */
static const char *parse_request(json_req_t *j)
{
	static const char *const known[] = {"domain", "descriptors",
					    "hitsAddend", "hits_addend", NULL};
	json_t *ds, *d;
	size_t i, nentries = 0, used = 0;
	uint64_t u;
	int dup = 0;
	const char *bad;

	if ((bad = unknown_member(j->root, known)))
		return "unknown field (expected domain, descriptors, "
		       "hitsAddend)";
	j->req.domain = str_value(json_object_get(j->root, "domain"));
	if (!j->req.domain)
		return "domain: expected a string";
	if (uint_value(field(j->root, "hitsAddend", "hits_addend", &dup),
		       UINT32_MAX, &u) < 0 ||
	    dup)
		return "hitsAddend: expected a uint32";
	j->req.hits_addend = (uint32_t)u;
	ds = json_object_get(j->root, "descriptors");
	if (ds && !json_is_null(ds) && !json_is_array(ds))
		return "descriptors: expected a list";
	if (!ds || !json_is_array(ds) || json_array_size(ds) == 0)
		return "rate limit descriptor list must not be empty";
	/* How many descriptors and entries a request may have is the RLS
	 * engine's to judge, for both front ends alike; the body size cap
	 * bounds what is allocated here. */
	json_array_foreach(ds, i, d)
	{
		json_t *es = json_is_object(d) ? json_object_get(d, "entries")
					       : NULL;

		if (json_is_array(es))
			nentries += json_array_size(es);
	}
	j->descs = calloc(json_array_size(ds), sizeof(*j->descs));
	j->entries = calloc(nentries ? nentries : 1, sizeof(*j->entries));
	if (!j->descs || !j->entries)
		return "out of memory";
	json_array_foreach(ds, i, d)
	{
		if ((bad = parse_descriptor(d, &j->descs[i], j->entries,
					    &used)))
			return bad;
	}
	j->req.descriptors = j->descs;
	j->req.ndescriptors = json_array_size(ds);
	return NULL;
}

/* ------------------------------------------------------------ the answer */

static const char *code_name(sluice_rls_code_t c)
{
	return c == SLUICE_RLS_CODE_OK		 ? "OK"
	       : c == SLUICE_RLS_CODE_OVER_LIMIT ? "OVER_LIMIT"
						 : "UNKNOWN";
}

/* A proto3 JSON Duration: "12s", "1.500s". */
static void duration(sluice_buf_t *b, uint64_t ms)
{
	sluice_buf_u64(b, ms / 1000);
	if (ms % 1000)
		sluice_buf_printf(b, ".%03u", (unsigned)(ms % 1000));
	sluice_buf_append(b, "s", 1);
}

static void json_str(sluice_buf_t *b, const char *s)
{
	sluice_buf_append(b, "\"", 1);
	sluice_buf_json_str(b, s, strlen(s));
	sluice_buf_append(b, "\"", 1);
}

static void render_status(sluice_buf_t *b, const sluice_rls_status_t *st)
{
	sluice_buf_puts(b, "{\"code\":\"");
	sluice_buf_puts(b, code_name(st->code));
	sluice_buf_append(b, "\"", 1);
	if (st->has_limit) {
		const char *sep = "";

		sluice_buf_puts(b, ",\"currentLimit\":{");
		if (st->limit_name) {
			sluice_buf_puts(b, "\"name\":");
			json_str(b, st->limit_name);
			sep = ",";
		}
		if (st->requests_per_unit) {
			sluice_buf_printf(b, "%s\"requestsPerUnit\":%u", sep,
					  st->requests_per_unit);
			sep = ",";
		}
		if (st->unit)
			sluice_buf_printf(b, "%s\"unit\":\"%s\"", sep,
					  sluice_envoy_unit_name(st->unit));
		sluice_buf_append(b, "}", 1);
	}
	if (st->limit_remaining)
		sluice_buf_printf(b, ",\"limitRemaining\":%u",
				  st->limit_remaining);
	if (st->has_limit) {
		sluice_buf_puts(b, ",\"durationUntilReset\":\"");
		duration(b, st->duration_until_reset_ms);
		sluice_buf_append(b, "\"", 1);
	}
	sluice_buf_append(b, "}", 1);
}

static void render(sluice_buf_t *b, const sluice_rls_response_t *r)
{
	size_t i;

	sluice_buf_puts(b, "{\"overallCode\":\"");
	sluice_buf_puts(b, code_name(r->overall_code));
	sluice_buf_puts(b, "\",\"statuses\":[");
	for (i = 0; i < r->nstatuses; i++) {
		if (i)
			sluice_buf_append(b, ",", 1);
		render_status(b, &r->statuses[i]);
	}
	sluice_buf_append(b, "]", 1);
	if (r->nheaders) {
		sluice_buf_puts(b, ",\"responseHeadersToAdd\":[");
		for (i = 0; i < r->nheaders; i++) {
			sluice_buf_puts(b, i ? ",{\"key\":" : "{\"key\":");
			json_str(b, r->headers[i].key);
			sluice_buf_puts(b, ",\"value\":");
			json_str(b, r->headers[i].value);
			sluice_buf_append(b, "}", 1);
		}
		sluice_buf_append(b, "]", 1);
	}
	if (r->dynamic_metadata) {
		sluice_buf_puts(b, ",\"dynamicMetadata\":");
		sluice_meta_json(b, r->dynamic_metadata);
	}
	sluice_buf_append(b, "}", 1);
}

static void on_answer(void *arg, sluice_rls_response_t *r)
{
	json_req_t *j = arg;
	sluice_conn_t *c = j->c;
	sluice_buf_t body = {0};
	int status;

	/* sluice_resp_end() may free c: everything of ours first. */
	json_req_free(j);
	if (r->status < 0) {
		sluice_rls_response_free(r);
		sluice_resp_store_error(c);
		return;
	}
	render(&body, r);
	status = r->overall_code == SLUICE_RLS_CODE_OVER_LIMIT ? 429
		 : r->overall_code == SLUICE_RLS_CODE_OK       ? 200
							       : 500;
	sluice_rls_response_free(r);
	if (body.oom) {
		sluice_buf_free(&body);
		sluice_resp_error(c, 500, "out_of_memory", NULL,
				  "out of memory");
		return;
	}
	sluice_resp_begin(c, status);
	sluice_resp_end(c, "application/json", body.data, body.len);
	sluice_buf_free(&body);
}

void sluice_rls_json(sluice_conn_t *c)
{
	json_req_t *j = calloc(1, sizeof(*j));
	const char *bad;
	char err[256];

	if (!j) {
		sluice_resp_error(c, 500, "out_of_memory", NULL,
				  "out of memory");
		return;
	}
	j->c = c;
	if (!(j->root = sluice_api_object(c))) {
		json_req_free(j);
		return; /* answered 400 */
	}
	if ((bad = parse_request(j))) {
		json_req_free(j);
		sluice_resp_error(c, 400, "bad_request", "body", bad);
		return;
	}
	sluice_conn_wait(c);
	if (sluice_rls_decide(c->svc, &j->req, on_answer, j, err, sizeof(err)) <
	    0) {
		json_req_free(j);
		sluice_resp_error(c, 400, "bad_request", "body", err);
	}
}

/* GET /healthcheck: "OK" when the store answers and the service is not
 * draining, else 500 (envoyproxy/ratelimit's answers). */
void sluice_rls_healthcheck(sluice_conn_t *c)
{
	if (sluice_rls_healthy(c->svc)) {
		sluice_resp_begin(c, 200);
		sluice_resp_end(c, "text/plain", "OK", 2);
	} else {
		sluice_resp_begin(c, 500);
		sluice_resp_end(c, "text/plain", "", 0);
	}
}
