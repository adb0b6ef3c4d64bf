/*
 * json_api.c -- POST /v1/take: a decision for application middleware.
 *
 * Two forms:
 *   {"key":"alice","capacity":100,"rate":"2/s","cost":1}   ad-hoc limit
 *   {"key":"alice","quota":1000,"per":"day"}               ad-hoc quota (UTC)
 *   {"rule":"api","key":"alice","cost":1,"tier":"paid"}    configured rule
 * (cost is optional, default 1 or the rule's cost; tier is optional and
 * only for rules with tiers).  The answer:
 *   {"allowed":true,"limit":100,"remaining":99,"retry_after_ms":0,
 *    "reset_ms":500}
 * With "max_wait_ms" (either form) the request waits for its turn
 * instead: a reservation, answered with "wait_ms" (see reserve_done()).
 * with the same rate-limit headers as /v1/check; status 429 when not
 * allowed.  A configured rule shares its buckets with /v1/check (the store
 * key is the same "<rule>\x1f<identity>"); ad-hoc keys live in their own
 * namespace.  Fields are strict, as in the config file: an unknown field
 * ("cots") or a mix of the two forms (capacity/rate with rule, tier
 * without) gets 400 naming it, never a silent default.  An ad-hoc bucket is its
 * key and its limit (every store names a bucket by key + sluice_limit_id()), so
 * a caller that gives another capacity or rate for the same key gets another
 * bucket and cannot drain or poison this one.  Bad input gets 400 with the
 * offending field named.
 */
#include "policy/ratelimit_headers.h"
#include "policy/request.h"
#include "serve/answer.h"
#include "serve/handlers.h"
#include "util/sha256.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define KEY_MAX 400 /* bytes of a caller's key; the store key adds a prefix */
static void bad(sluice_conn_t *c, const char *field, const char *message)
{
	sluice_resp_error(c, 400, "bad_request", field, message);
}

/* Answers 400 for the first field this form does not take; returns 0
 * when every field is known. */
static int check_fields(sluice_conn_t *c, json_t *obj, int has_rule)
{
	static const char *const known[] = {
		"key",	       "cost",	"rule", "tier",	 "capacity", "rate",
		"max_wait_ms", "quota", "per",	"align", "tz"};
	const char *name;
	json_t *v;
	char msg[160];
	size_t i;

	json_object_foreach(obj, name, v)
	{
		for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			if (strcmp(name, known[i]) == 0)
				break;
		if (i == sizeof(known) / sizeof(known[0])) {
			size_t n = strlen(name);

			/* The message quotes at most 60 bytes, cut on a
			 * UTF-8 boundary; "field" carries the whole name. */
			if (n > 60)
				for (n = 60; n > 0 && ((unsigned char)name[n] &
						       0xc0) == 0x80;)
					n--;
			snprintf(msg, sizeof(msg),
				 "unknown field \"%.*s\" (expected key, "
				 "cost, max_wait_ms, and rule with tier, or "
				 "capacity with rate, or quota with per)",
				 (int)n, name);
			bad(c, name, msg);
			return -1;
		}
		if (has_rule && (i == 4 || i == 5 || i >= 7)) {
			bad(c, name,
			    "not allowed with \"rule\": the rule's limits "
			    "apply (drop \"rule\" for an ad-hoc limit)");
			return -1;
		}
		if (!has_rule && i == 3) {
			bad(c, name, "only with \"rule\"");
			return -1;
		}
	}
	return 0;
}

/* An optional non-negative integer field; returns 0, 1 (absent) or -1
 * (after answering 400). */
static int get_uint(sluice_conn_t *c, json_t *obj, const char *field,
		    uint64_t min, uint64_t max, uint64_t *out)
{
	json_t *v = json_object_get(obj, field);
	char msg[128];

	if (!v || json_is_null(v))
		return 1;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) < min ||
	    (uint64_t)json_integer_value(v) > max) {
		snprintf(msg, sizeof(msg),
			 "expected an integer from %llu to %llu",
			 (unsigned long long)min, (unsigned long long)max);
		bad(c, field, msg);
		return -1;
	}
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* The policy's answer, as JSON with the same rate-limit headers as
 * /v1/check. */
static void take_done(void *arg, const sluice_answer_t *a)
{
	sluice_conn_t *c = arg;
	const sluice_take_t *t = a->take;
	const sluice_verdict_t *v = &t->verdict;
	sluice_buf_t body = {0};
	const sluice_decision_t *d = &v->summary;
	uint64_t retry_us = 0;

	/* sluice_resp_end() may free c: nothing of c after it. */
	c->take = NULL;
	if (a->kind == SLUICE_ANSWER_STORE_ERROR) {
		sluice_resp_store_error(c);
		return;
	}
	if (v->report >= 0 && !v->allowed)
		retry_us = sluice_retry_us(
			&t->matches[v->report].set->limits[v->which], d);
	sluice_buf_printf(&body, "{\"allowed\":%s,\"limit\":",
			  v->allowed ? "true" : "false");
	sluice_buf_u64(&body, v->report >= 0 ? d->limit : 0);
	sluice_buf_puts(&body, ",\"remaining\":");
	sluice_buf_u64(&body, v->report >= 0 ? d->remaining : 0);
	sluice_buf_puts(&body, ",\"retry_after_ms\":");
	sluice_buf_u64(&body, sluice_us_to_ms_ceil(retry_us));
	sluice_buf_puts(&body, ",\"reset_ms\":");
	sluice_buf_u64(&body, v->report >= 0
				      ? sluice_us_to_ms_ceil(d->reset_after_us)
				      : 0);
	sluice_buf_puts(&body, "}");
	sluice_resp_begin(c, v->allowed ? 200 : 429);
	sluice_answer_headers(a, &c->out);
	sluice_resp_end(c, "application/json", body.data, body.len);
	sluice_buf_free(&body);
}

/* ------------------------------------------------------ reservations */

/*
 * {"max_wait_ms": N} reserves instead of taking (store.h's reserve): the
 * request is charged now, into debt if need be, and answered with
 * "wait_ms", the time until its turn (200); a turn more than N ms away
 * is refused, charging nothing (429, retry_after_ms: until a reservation
 * with the same max_wait_ms would pass, and the wait_ms it would have
 * had).  One key and its limits, as a take of the same body charges;
 * a store that fails answers 503 (a reservation has no fail-open).  A
 * reservation with a cost answers "state", the states it left: a caller
 * that gives up its turn sends it to /v1/refund as "if_state".
 */
static void reserve_done(void *arg, int status, const sluice_reservation_t *r)
{
	sluice_conn_t *c = arg;
	sluice_take_t *t = c->take;
	sluice_svc_t *svc = c->svc;
	sluice_buf_t body = {0};
	const sluice_decision_t *d;
	uint64_t retry_ms;

	/* sluice_resp_end() may free c: nothing of c after it. */
	c->take = NULL;
	if (status || !r) {
		sluice_resp_store_error(c);
		sluice_take_put(svc, t);
		return;
	}
	d = &r->summary;
	retry_ms = r->reserved ? 0
		   : d->retry_after_us == UINT64_MAX
			   ? 0
			   : sluice_us_to_ms_ceil(d->retry_after_us);
	sluice_buf_printf(&body, "{\"allowed\":%s,\"limit\":",
			  r->reserved ? "true" : "false");
	sluice_buf_u64(&body, d->limit);
	sluice_buf_puts(&body, ",\"remaining\":");
	sluice_buf_u64(&body, d->remaining);
	sluice_buf_puts(&body, ",\"retry_after_ms\":");
	sluice_buf_u64(&body, retry_ms);
	sluice_buf_puts(&body, ",\"reset_ms\":");
	sluice_buf_u64(&body, sluice_us_to_ms_ceil(d->reset_after_us));
	if (r->wait_us != UINT64_MAX) {
		sluice_buf_puts(&body, ",\"wait_ms\":");
		sluice_buf_u64(&body, sluice_us_to_ms_ceil(r->wait_us));
	}
	if (r->reserved && t->costs[0] > 0) {
		/* What this reservation left: /v1/refund's if_state gives it
		 * back only while nothing was charged after it. */
		char state[SLUICE_STATES_TEXT_MAX];

		sluice_states_format(r->states, t->matches[0].set->nlimits,
				     state, sizeof(state));
		sluice_buf_printf(&body, ",\"state\":\"%s\"", state);
	}
	sluice_buf_puts(&body, "}");
	sluice_resp_begin(c, r->reserved ? 200 : 429);
	if (!r->reserved && retry_ms)
		sluice_buf_printf(&c->out, "Retry-After: %llu\r\n",
				  (unsigned long long)(retry_ms + 999) / 1000);
	sluice_resp_end(c, "application/json", body.data, body.len);
	sluice_buf_free(&body);
	sluice_take_put(svc, t);
}

/* Starts the reservation of t's one match (checked, built). */
static void reserve_start(sluice_conn_t *c, sluice_take_t *t,
			  uint64_t max_wait_ms)
{
	const sluice_store_ops_t *ops = c->svc->backend.ops;
	const sluice_match_t *m = &t->matches[0];
	sluice_take_item_t it;
	int rc;

	if (!ops->reserve) {
		sluice_take_put(c->svc, t);
		sluice_resp_error(c, 501, "not_implemented", "max_wait_ms",
				  "this store cannot reserve");
		return;
	}
	memset(&it, 0, sizeof(it));
	it.key = m->key;
	it.keylen = m->keylen;
	it.limits = m->set->limits;
	it.nlimits = m->set->nlimits;
	it.cost = t->costs[0];
	c->take = t;
	sluice_conn_wait(c);
	/* The item is copied by a store that answers later (Redis) and
	 * used at once by the others. */
	rc = ops->reserve(c->svc->backend.impl, &it, max_wait_ms * 1000,
			  sluice_now_us(), reserve_done, c);
	if (rc < 0)
		reserve_done(c, rc, NULL);
}

/* Reads "rate": a string ("2/s", "50/min") or a number (per second). */
static int get_rate(sluice_conn_t *c, json_t *obj, sluice_rate_t *rate)
{
	json_t *v = json_object_get(obj, "rate");
	char text[64], err[160];

	if (json_is_string(v)) {
		size_t n = json_string_length(v);

		/* Whole or not at all: a cut rate ("2/s" and junk past 63
		 * bytes, or past a NUL) would read as another one. */
		if (n >= sizeof(text) || memchr(json_string_value(v), 0, n)) {
			bad(c, "rate",
			    "expected a rate such as \"2/s\" (at most 63 "
			    "bytes)");
			return -1;
		}
		memcpy(text, json_string_value(v), n + 1);
	} else if (json_is_integer(v))
		snprintf(text, sizeof(text), "%lld",
			 (long long)json_integer_value(v));
	else if (json_is_real(v))
		snprintf(text, sizeof(text), "%.15g", json_real_value(v));
	else {
		bad(c, "rate",
		    v ? "expected a rate such as \"2/s\" or 2"
		      : "required for an ad-hoc limit");
		return -1;
	}
	if (sluice_rate_parse(text, rate, err, sizeof(err)) < 0) {
		bad(c, "rate", err);
		return -1;
	}
	return 0;
}

/* An optional string field of at most 31 bytes into buf; returns 0, 1
 * (absent) or -1 (after answering 400). */
static int get_word(sluice_conn_t *c, json_t *obj, const char *field,
		    char buf[32], const char *expected)
{
	json_t *v = json_object_get(obj, field);
	size_t n;

	if (!v)
		return 1;
	n = json_is_string(v) ? json_string_length(v) : 0;
	if (!n || n >= 32 || memchr(json_string_value(v), 0, n)) {
		bad(c, field, expected);
		return -1;
	}
	memcpy(buf, json_string_value(v), n + 1);
	return 0;
}

/* {"quota":N,"per":"day","align":"calendar"|"first_use"}: windows of UTC
 * (an ad-hoc limit names no zone, so a caller cannot make the server load
 * zone files; a configured rule may have one). */
static int api_quota(sluice_conn_t *c, json_t *obj, sluice_limit_t *out)
{
	static const char *const units =
		"expected second, minute, hour, day, week, month or year";
	uint64_t quota = 0;
	uint8_t per = 0, align = SLUICE_ALIGN_CALENDAR;
	char word[32], err[160];
	int r;

	if (json_object_get(obj, "capacity") || json_object_get(obj, "rate")) {
		bad(c, json_object_get(obj, "capacity") ? "capacity" : "rate",
		    "not allowed with \"quota\": a limit is a quota (quota, "
		    "per) or a token bucket (capacity, rate)");
		return -1;
	}
	r = get_uint(c, obj, "quota", 1, SLUICE_QUOTA_MAX, &quota);
	if (r != 0)
		return -1; /* present, so not 1 */
	r = get_word(c, obj, "per", word, units);
	if (r == 1)
		bad(c, "per", "required with \"quota\"; e.g. \"day\"");
	if (r != 0)
		return -1;
	if (sluice_per_parse(word, &per, err, sizeof(err)) < 0) {
		bad(c, "per", units);
		return -1;
	}
	r = get_word(c, obj, "align", word, "expected calendar or first_use");
	if (r < 0)
		return -1;
	if (r == 0 && strcmp(word, "first_use") == 0)
		align = SLUICE_ALIGN_FIRST_USE;
	else if (r == 0 && strcmp(word, "calendar") != 0) {
		bad(c, "align", "expected calendar or first_use");
		return -1;
	}
	if (sluice_quota_init(out, quota, per, align, 0, err, sizeof(err)) <
	    0) {
		bad(c, "quota", err);
		return -1;
	}
	return 0;
}

int sluice_api_limit(sluice_conn_t *c, json_t *obj, sluice_limit_t *out)
{
	uint64_t capacity = 0;
	sluice_rate_t rate;
	char err[160];
	int r;

	if (json_object_get(obj, "tz")) {
		bad(c, "tz",
		    "an ad-hoc quota's windows are UTC; a quota in a time "
		    "zone is a configured rule's (tz: in the config)");
		return -1;
	}
	if (json_object_get(obj, "quota"))
		return api_quota(c, obj, out);
	if (json_object_get(obj, "per") || json_object_get(obj, "align")) {
		bad(c, json_object_get(obj, "per") ? "per" : "align",
		    "only with \"quota\"");
		return -1;
	}
	r = get_uint(c, obj, "capacity", 1, SLUICE_UNITS_MAX, &capacity);
	if (r == 1)
		bad(c, "capacity",
		    "required for an ad-hoc limit (or give "
		    "\"rule\")");
	if (r != 0 || get_rate(c, obj, &rate) < 0)
		return -1;
	if (sluice_limit_init(out, capacity, &rate, err, sizeof(err)) < 0) {
		bad(c, "capacity", err);
		return -1;
	}
	return 0;
}

const sluice_rule_t *sluice_api_rule(sluice_conn_t *c,
				     const sluice_config_t *cfg,
				     const char *name, size_t len)
{
	char msg[160];
	size_t i;

	for (i = 0; i < cfg->nrules; i++)
		if (strlen(cfg->rules[i].name) == len &&
		    memcmp(cfg->rules[i].name, name, len) == 0)
			return &cfg->rules[i];
	snprintf(msg, sizeof(msg), "no rule named \"%.100s\"", name);
	bad(c, "rule", msg);
	return NULL;
}

json_t *sluice_api_object(sluice_conn_t *c)
{
	json_error_t jerr;
	json_t *obj;
	char msg[256];

	obj = json_loadb(c->body.data ? c->body.data : "", c->body.len,
			 JSON_REJECT_DUPLICATES, &jerr);
	if (!obj) {
		snprintf(msg, sizeof(msg),
			 "invalid JSON at line %d column %d: %s", jerr.line,
			 jerr.column, jerr.text);
		bad(c, "body", msg);
		return NULL;
	}
	if (!json_is_object(obj)) {
		bad(c, "body", "expected a JSON object");
		json_decref(obj);
		return NULL;
	}
	return obj;
}

const char *sluice_api_key(sluice_conn_t *c, json_t *obj, size_t *keylen)
{
	json_t *jkey = json_object_get(obj, "key");

	if (!json_is_string(jkey)) {
		bad(c, "key", jkey ? "expected a string" : "required");
		return NULL;
	}
	*keylen = json_string_length(jkey);
	if (*keylen == 0 || *keylen > KEY_MAX) {
		bad(c, "key", "expected 1 to 400 bytes");
		return NULL;
	}
	return json_string_value(jkey);
}

/* Fills matches[0] for the ad-hoc form. */
static int adhoc(sluice_conn_t *c, json_t *obj, sluice_take_t *t,
		 const char *key, size_t keylen, uint64_t cost)
{
	sluice_rule_t *rule = &t->scratch_rule;
	sluice_match_t *m = &t->matches[0];

	memset(rule, 0, sizeof(*rule));
	if (sluice_api_limit(c, obj, &rule->limits.limits[0]) < 0)
		return -1;
	rule->name = "adhoc";
	rule->cost = cost;
	rule->on_store_error = SLUICE_FAIL_OPEN;
	rule->limits.name = rule->name;
	rule->limits.nlimits = 1;
	if (cost > rule->limits.limits[0].capacity) {
		bad(c, "cost",
		    "exceeds the capacity (or quota): it could never pass");
		return -1;
	}
	m->rule = rule;
	m->set = &rule->limits;
	sluice_adhoc_key(key, keylen, m);
	return 0;
}

/* Fills matches[0] for the configured-rule form. */
static int configured(sluice_conn_t *c, json_t *obj, sluice_take_t *t,
		      const char *name, const char *key, size_t keylen,
		      int has_cost, uint64_t cost)
{
	const sluice_config_t *cfg = c->req_live->cfg;
	const sluice_rule_t *rule = NULL;
	sluice_match_t *m = &t->matches[0];
	json_t *tier = json_object_get(obj, "tier");

	rule = sluice_api_rule(
		c, cfg, name, json_string_length(json_object_get(obj, "rule")));
	if (!rule)
		return -1;
	if (tier && !json_is_string(tier)) {
		bad(c, "tier", "expected a tier name");
		return -1;
	}
	if (tier && rule->ntiers == 0) {
		bad(c, "tier", "this rule has no tiers");
		return -1;
	}
	m->rule = rule;
	m->set = sluice_rule_tier(rule, tier ? json_string_value(tier) : NULL,
				  tier ? json_string_length(tier) : 0);
	/* The same store key /v1/check builds for this identity. */
	sluice_rule_key(rule, key, keylen, m);
	t->costs[0] = has_cost ? cost : rule->cost;
	return 0;
}

void sluice_api_take(sluice_conn_t *c)
{
	json_t *obj, *jrule;
	sluice_take_t *t = NULL;
	uint64_t cost = 1, max_wait_ms = 0;
	const char *key;
	size_t keylen;
	int r, reserve;

	obj = sluice_api_object(c);
	if (!obj)
		return;
	if (check_fields(c, obj, json_object_get(obj, "rule") != NULL) < 0)
		goto out;
	key = sluice_api_key(c, obj, &keylen);
	if (!key)
		goto out;
	r = get_uint(c, obj, "cost", 0, UINT32_MAX, &cost);
	if (r < 0)
		goto out;
	/* At most SLUICE_WAIT_MAX_US, about 12.7 days. */
	reserve = get_uint(c, obj, "max_wait_ms", 0, SLUICE_WAIT_MAX_US / 1000,
			   &max_wait_ms);
	if (reserve < 0)
		goto out;
	jrule = json_object_get(obj, "rule");
	if (jrule && !json_is_string(jrule)) {
		bad(c, "rule", "expected a rule name");
		goto out;
	}
	t = sluice_take_get(c->svc);
	if (!t) {
		sluice_resp_error(c, 500, "out_of_memory", NULL, "try again");
		goto out;
	}
	t->nmatches = 1;
	t->costs[0] = cost;
	if (jrule ? configured(c, obj, t, json_string_value(jrule), key, keylen,
			       r == 0, cost)
		  : adhoc(c, obj, t, key, keylen, cost)) {
		sluice_take_put(c->svc, t);
		goto out;
	}
	json_decref(obj);
	if (reserve == 0) {
		reserve_start(c, t, max_wait_ms);
		return;
	}
	c->take = t;
	sluice_conn_wait(c);
	sluice_decide_take(c->svc, c->req_live, t, sluice_now_us(), take_done,
			   c);
	return;
out:
	json_decref(obj);
}
