/*
 * admin.c -- the admin endpoints, off unless `admin:` gives a token.
 *
 *   POST /v1/reset  {"rule":"api","key":"alice"}
 *                   {"key":"alice","capacity":100,"rate":"2/s"}   ad-hoc
 *       the key's buckets become full: every limit of the rule, in every
 *       tier and its override (an ad-hoc bucket: that limit).
 *   POST /v1/refund {"rule":"api","key":"alice","cost":3,"tier":"paid"}
 *                   {"key":"alice","capacity":100,"rate":"2/s","cost":3}
 *       gives cost tokens back (default: the rule's cost, or 1) to the
 *       buckets a take of the same fields charged, never beyond full.
 *       With "if_state" (the "state" a /v1/take with max_wait_ms
 *       answered): only while the buckets still hold it, i.e. nothing was
 *       charged after that reservation; else 409 {"error":"not_refunded"}
 *       and nothing changes (refunding then would let one request more
 *       than the limit into the turn given after it).
 *   POST /v1/set    {"rule":"api","key":"alice","remaining":5,"tier":"paid"}
 *                   {"key":"alice","capacity":100,"rate":"2/s","remaining":5}
 *       those buckets hold `remaining` whole tokens from now (the
 *       capacity or more: full), whatever they held (full ones too).
 *
 * A reset or refund of a key none of whose buckets holds state (all
 * full: the same as none) gets 404 {"status":"not_found",...} and nothing is
 * changed: a reset or refund that names a wrong key or identity says so.
 *
 * Requests carry "Authorization: Bearer <token>"; a missing or wrong token
 * gets 401, and without `admin:` the paths do not exist (404).  The token
 * is compared through SHA-256 digests in constant time, so the answer's
 * timing tells nothing about how much of a guess was right, nor the
 * token's length.  Keys are the ones /v1/check and /v1/take use
 * (sluice_rule_key(); ad-hoc keys in their own namespace), and the verbs
 * run on the store driver (memory, Redis scripts, same with the module).
 */
#include "policy/envoy/config.h"
#include "serve/answer.h"
#include "serve/handlers.h"
#include "util/invariant.h"
#include "util/log.h"
#include "util/sha256.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TIERS_MAX 64 /* as the config reader allows */

/* One reset or refund in flight: what the store reads until it answers. */
typedef struct admin_op_s {
	sluice_conn_t *c;
	int verb;	    /* SLUICE_ADMIN_* */
	uint64_t remaining; /* set: the tokens to leave */
	int conditional;    /* refund with if_state: expected[] */
	sluice_state_t expected[SLUICE_MAX_LIMITS];
	sluice_take_item_t items[TIERS_MAX + 1]; /* every tier, an override */
	const sluice_limit_set_t *sets[TIERS_MAX + 1]; /* items' (the rule
							  form), for carry */
	size_t n;
	/* One item per limit of items[], cost 0: which buckets hold state. */
	sluice_take_item_t peek[(TIERS_MAX + 1) * SLUICE_MAX_LIMITS];
	size_t npeek, ipeek;
	int64_t now_us;
	sluice_limit_t adhoc;
	sluice_match_t m; /* the store key */
	char what[200];	  /* for the log: which verb on which bucket */
} admin_op_t;

static void bad(sluice_conn_t *c, const char *field, const char *message)
{
	sluice_resp_error(c, 400, "bad_request", field, message);
}

/* 1 when the request carries the configured bearer token. */
static int authorized(const sluice_conn_t *c, const char *token)
{
	static const char scheme[] = "bearer ";
	const size_t slen = sizeof(scheme) - 1;
	uint8_t want[32], got[32], diff = 0;
	const void *buf;
	size_t len, i;
	const char *h = sluice_conn_header(c, "authorization", &len);

	if (!h || len <= slen || strncasecmp(h, scheme, slen) != 0)
		return 0;
	buf = token;
	i = strlen(token);
	sluice_sha256(&buf, &i, 1, want);
	buf = h + slen;
	len -= slen;
	sluice_sha256(&buf, &len, 1, got);
	for (i = 0; i < 32; i++)
		diff |= (uint8_t)(want[i] ^ got[i]);
	return diff == 0;
}

static void op_done(void *arg, int status, int allowed)
{
	admin_op_t *op = arg;
	sluice_conn_t *c = op->c;
	const char *body =
		op->verb == SLUICE_ADMIN_REFUND ? "{\"status\":\"refunded\"}"
		: op->verb == SLUICE_ADMIN_SET	? "{\"status\":\"set\"}"
						: "{\"status\":\"reset\"}";
	int refused = !status && op->conditional && !allowed;

	/* Admin actions are rare and change limits: each one is logged. */
	if (!status)
		sluice_log_info("admin: %s%s", op->what,
				refused ? ": not refunded (charged since)"
					: "");
	else
		sluice_log_warn("admin: %s failed: the store did not answer",
				op->what);
	free(op);
	if (refused) {
		sluice_resp_error(c, 409, "not_refunded", "if_state",
				  "the buckets moved on since that "
				  "reservation (a later one was given its "
				  "turn, or a take charged them): nothing "
				  "given back");
		return;
	}
	if (status) {
		sluice_resp_error(c, 503, "store_unavailable", NULL,
				  "the rate-limit store failed; nothing may "
				  "have changed, try again");
		return;
	}
	sluice_resp_begin(c, 200);
	sluice_resp_end(c, "application/json", body, strlen(body));
}

/* After the peek: the verb, or "not_found" when no bucket of the key
 * holds any state.  A full bucket and no bucket are the same thing (a
 * store forgets a bucket once it is full), so there is nothing to reset or
 * refund; saying so tells an operator who named the wrong key, rule or
 * identity (a composite identity is its parts joined by 0x1f) that
 * nothing changed. */
static void peek_next(admin_op_t *op);

static void peek_done(void *arg, int status, int allowed)
{
	static const char body[] =
		"{\"status\":\"not_found\",\"message\":\"no bucket of this key "
		"holds state (every one is full): nothing changed\"}";
	admin_op_t *op = arg;
	sluice_conn_t *c = op->c;
	sluice_backend_t *be = &c->svc->backend;
	int rc;

	(void)allowed;
	if (status) {
		op_done(op, status, 0);
		return;
	}
	if (op->peek[op->ipeek].summary.reset_after_us == 0 &&
	    ++op->ipeek < op->npeek) {
		peek_next(op); /* this one is full: the next */
		return;
	}
	if (op->ipeek == op->npeek) {
		sluice_log_info("admin: %s: no bucket holds state", op->what);
		free(op);
		sluice_resp_begin(c, 404);
		sluice_resp_end(c, "application/json", body, sizeof(body) - 1);
		return;
	}
	rc = op->verb == SLUICE_ADMIN_REFUND
		     ? be->ops->refund(be->impl, op->items, op->n, op->now_us,
				       op_done, op)
		     : be->ops->reset(be->impl, op->items, op->n, op_done, op);
	if (rc < 0)
		op_done(op, rc, 0);
}

/* set: whatever the buckets hold (full ones too), no peek first. */
static void set_now(admin_op_t *op)
{
	sluice_backend_t *be = &op->c->svc->backend;
	int rc = be->ops->set(be->impl, op->items, op->n, op->remaining,
			      op->now_us, op_done, op);

	if (rc < 0)
		op_done(op, rc, 0);
}

/* Peeks at one bucket (a store may refuse one key in two items of a
 * take, so one take each; admin calls are rare). */
static void peek_next(admin_op_t *op)
{
	sluice_backend_t *be = &op->c->svc->backend;
	int rc = be->ops->take(be->impl, &op->peek[op->ipeek], 1, op->now_us,
			       peek_done, op);

	if (rc < 0)
		op_done(op, rc, 0);
}

/* One cost-0 item per limit of every item (a take's summary is only the
 * most restrictive limit's; a bucket is one key and one limit). */
static void build_peek(admin_op_t *op)
{
	size_t i, j;

	op->npeek = 0;
	for (i = 0; i < op->n; i++)
		for (j = 0; j < op->items[i].nlimits; j++) {
			sluice_take_item_t *p = &op->peek[op->npeek++];

			memset(p, 0, sizeof(*p));
			p->key = op->items[i].key;
			p->keylen = op->items[i].keylen;
			p->limits = &op->items[i].limits[j];
			p->nlimits = 1;
			p->cost = 0;
		}
}

/* "reset of rule "api" key "alice"" for the log: at most 64 bytes of the
 * key, control characters and quotes replaced, so a key cannot forge a
 * log line. */
static void describe(admin_op_t *op, const char *rule, const char *key,
		     size_t len)
{
	char safe[72];
	size_t i, n = len > 64 ? 64 : len;

	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)key[i];

		safe[i] = ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\'
				  ? '?'
				  : (char)ch;
	}
	if (len > n)
		memcpy(safe + n, "...", 4);
	else
		safe[n] = '\0';
	snprintf(op->what, sizeof(op->what), "%s of %s%.*s%s key \"%s\"",
		 op->conditional		   ? "conditional refund"
		 : op->verb == SLUICE_ADMIN_REFUND ? "refund"
		 : op->verb == SLUICE_ADMIN_SET	   ? "set"
						   : "reset",
		 rule ? "rule \"" : "ad-hoc", rule ? 64 : 0, rule ? rule : "",
		 rule ? "\"" : "", safe);
}

/* 400 for a field this verb does not take (as /v1/take is strict). */
static int check_fields(sluice_conn_t *c, json_t *obj, int verb)
{
	const int refund = verb == SLUICE_ADMIN_REFUND,
		  set = verb == SLUICE_ADMIN_SET;
	const char *name;
	json_t *v;
	char msg[160];
	int rule = json_object_get(obj, "rule") != NULL;

	json_object_foreach(obj, name, v)
	{
		int known =
			strcmp(name, "key") == 0 || strcmp(name, "rule") == 0 ||
			strcmp(name, "capacity") == 0 ||
			strcmp(name, "rate") == 0 ||
			strcmp(name, "quota") == 0 ||
			strcmp(name, "per") == 0 ||
			strcmp(name, "align") == 0 || strcmp(name, "tz") == 0 ||
			(refund && strcmp(name, "cost") == 0) ||
			(refund && strcmp(name, "if_state") == 0) ||
			(set && strcmp(name, "remaining") == 0) ||
			((refund || set) && strcmp(name, "tier") == 0);

		if (!known) {
			snprintf(msg, sizeof(msg),
				 "unknown field; expected key with rule%s, "
				 "or key, capacity and rate (or quota and "
				 "per)%s",
				 refund || set ? " (and tier)" : "",
				 refund ? ", and cost, if_state"
				 : set	? ", and remaining"
					: "");
			bad(c, name, msg);
			return -1;
		}
		if (rule &&
		    (strcmp(name, "capacity") == 0 ||
		     strcmp(name, "rate") == 0 || strcmp(name, "quota") == 0 ||
		     strcmp(name, "per") == 0 || strcmp(name, "align") == 0 ||
		     strcmp(name, "tz") == 0)) {
			bad(c, name, "not allowed with \"rule\"");
			return -1;
		}
		if (!rule && strcmp(name, "tier") == 0) {
			bad(c, name, "only with \"rule\"");
			return -1;
		}
	}
	return 0;
}

/* The ad-hoc form: one item on "\x1e<key>" and the caller's limit, read as
 * /v1/take reads it. */
static int adhoc(sluice_conn_t *c, json_t *obj, admin_op_t *op, const char *key,
		 size_t keylen)
{
	if (sluice_api_limit(c, obj, &op->adhoc) < 0)
		return -1;
	/* The key json_api.c gives the same ad-hoc bucket. */
	sluice_adhoc_key(key, keylen, &op->m);
	op->items[0].limits = &op->adhoc;
	op->items[0].nlimits = 1;
	op->n = 1;
	return 0;
}

/* The rule form: a reset covers every tier, a refund or set the tier a
 * take of the same fields used. */
static int configured(sluice_conn_t *c, json_t *obj, admin_op_t *op,
		      const char *name, const char *key, size_t keylen,
		      uint64_t *cost)
{
	const sluice_config_t *cfg = c->req_live->cfg;
	const sluice_rule_t *rule = NULL;
	json_t *tier = json_object_get(obj, "tier");
	const sluice_limit_set_t *set;
	size_t i;

	rule = sluice_api_rule(
		c, cfg, name, json_string_length(json_object_get(obj, "rule")));
	if (!rule)
		return -1;
	if (tier && (!json_is_string(tier) || rule->ntiers == 0)) {
		bad(c, "tier",
		    rule->ntiers ? "expected a tier name"
				 : "this rule has no tiers");
		return -1;
	}
	/* Sets m.set when the key has an override. */
	sluice_rule_key(rule, key, keylen, &op->m);
	if (op->verb == SLUICE_ADMIN_RESET) {
		const sluice_limit_set_t *sets =
			rule->ntiers ? rule->tiers : &rule->limits;
		size_t nsets = rule->ntiers ? rule->ntiers : 1;

		for (i = 0; i < nsets && i < TIERS_MAX; i++) {
			op->sets[i] = &sets[i];
			op->items[i].limits = sets[i].limits;
			op->items[i].nlimits = sets[i].nlimits;
		}
		if (op->m.set) {
			op->sets[i] = op->m.set;
			op->items[i].limits = op->m.set->limits;
			op->items[i].nlimits = op->m.set->nlimits;
			i++;
		}
		op->n = i;
		return 0;
	}
	set = op->m.set
		      ? op->m.set
		      : sluice_rule_tier(rule,
					 tier ? json_string_value(tier) : NULL,
					 tier ? json_string_length(tier) : 0);
	op->sets[0] = set;
	op->items[0].limits = set->limits;
	op->items[0].nlimits = set->nlimits;
	op->n = 1;
	if (!json_object_get(obj, "cost"))
		*cost = rule->cost;
	return 0;
}

/* A refund's "if_state" (the "state" of a /v1/take with max_wait_ms),
 * one state per limit of the refunded item: 0 (op->conditional set when
 * given), or -1 after answering 400. */
static int if_state(sluice_conn_t *c, json_t *obj, admin_op_t *op)
{
	json_t *v = json_object_get(obj, "if_state");

	if (!v)
		return 0;
	SLUICE_ASSERT(op->n == 1 && op->verb == SLUICE_ADMIN_REFUND);
	if (!json_is_string(v) ||
	    sluice_states_parse(json_string_value(v), json_string_length(v),
				op->items[0].nlimits, op->expected) != 0) {
		bad(c, "if_state",
		    "expected the \"state\" a /v1/take with max_wait_ms "
		    "answered for these buckets");
		return -1;
	}
	op->conditional = 1;
	return 0;
}

/* Whether an admin endpoint may answer c: 1, or 0 after answering 404
 * (no admin: in the config) or 401 (no or a wrong token). */
static int admin_gate(sluice_conn_t *c)
{
	static const char unauthorized[] =
		"{\"error\":\"unauthorized\",\"message\":\"expected "
		"Authorization: Bearer <admin token>\"}";
	const sluice_config_t *cfg = c->req_live->cfg;

	if (!cfg->admin_token) {
		sluice_resp_error(c, 404, "not_found", NULL,
				  "the admin endpoints are off (no admin: "
				  "in the config)");
		return 0;
	}
	if (!authorized(c, cfg->admin_token)) {
		sluice_resp_begin(c, 401);
		sluice_buf_puts(&c->out, "WWW-Authenticate: Bearer\r\n");
		sluice_resp_end(c, "application/json", unauthorized,
				sizeof(unauthorized) - 1);
		return 0;
	}
	return 1;
}

void sluice_api_rlconfig(sluice_conn_t *c)
{
	const sluice_envoy_config_t *e = c->req_live->cfg->envoy;
	sluice_buf_t body = {0};

	if (!admin_gate(c))
		return;
	if (!e) {
		sluice_resp_error(c, 404, "not_found", NULL,
				  "no envoy: section in the config");
		return;
	}
	sluice_envoy_dump(e, &body);
	if (body.oom) {
		sluice_buf_free(&body);
		sluice_resp_error(c, 500, "out_of_memory", NULL,
				  "out of memory");
		return;
	}
	sluice_resp_begin(c, 200);
	sluice_resp_end(c, "text/plain; charset=utf-8", body.data, body.len);
	sluice_buf_free(&body);
}

/* "cost" (0 with it in *cost, when given) and "rule" (a string, when
 * given): 0, or -1 after answering 400. */
static int check_cost_rule(sluice_conn_t *c, json_t *obj, uint64_t *cost)
{
	json_t *jcost = json_object_get(obj, "cost");
	json_t *jrule = json_object_get(obj, "rule");

	if (jcost &&
	    (!json_is_integer(jcost) || json_integer_value(jcost) < 0 ||
	     json_integer_value(jcost) > UINT32_MAX)) {
		bad(c, "cost", "expected an integer from 0 to 4294967295");
		return -1;
	}
	if (jcost)
		*cost = (uint64_t)json_integer_value(jcost);
	if (jrule && !json_is_string(jrule)) {
		bad(c, "rule", "expected a rule name");
		return -1;
	}
	return 0;
}

/* A set's "remaining" into op: 0, or -1 after answering 400. */
static int read_remaining(sluice_conn_t *c, json_t *obj, admin_op_t *op)
{
	json_t *jr = json_object_get(obj, "remaining");

	if (!jr || !json_is_integer(jr) || json_integer_value(jr) < 0 ||
	    json_integer_value(jr) > UINT32_MAX) {
		bad(c, "remaining",
		    "expected the tokens to leave, an integer from 0 "
		    "to 4294967295");
		return -1;
	}
	op->remaining = (uint64_t)json_integer_value(jr);
	return 0;
}

/* The request's object read into an op for the verb, its items keyed and
 * costed: the op, or NULL after answering (400, 500). */
static admin_op_t *op_read(sluice_conn_t *c, json_t *obj, int verb)
{
	admin_op_t *op;
	json_t *jrule;
	uint64_t cost = 1;
	const char *key;
	size_t keylen, i;

	if (check_fields(c, obj, verb) < 0)
		return NULL;
	key = sluice_api_key(c, obj, &keylen);
	if (!key || check_cost_rule(c, obj, &cost) < 0)
		return NULL;
	if (!(op = calloc(1, sizeof(*op)))) {
		sluice_resp_error(c, 500, "out_of_memory", NULL, "try again");
		return NULL;
	}
	op->c = c;
	op->verb = verb;
	jrule = json_object_get(obj, "rule");
	if ((verb == SLUICE_ADMIN_SET && read_remaining(c, obj, op) < 0) ||
	    (jrule ? configured(c, obj, op, json_string_value(jrule), key,
				keylen, &cost)
		   : adhoc(c, obj, op, key, keylen)) ||
	    if_state(c, obj, op) < 0) {
		free(op);
		return NULL;
	}
	describe(op, jrule ? json_string_value(jrule) : NULL, key, keylen);
	for (i = 0; i < op->n; i++) {
		op->items[i].key = op->m.key;
		op->items[i].keylen = op->m.keylen;
		op->items[i].cost = cost;
	}
	return op;
}

/* Whether the store has the verbs op needs. */
static int store_can(const sluice_backend_t *be, const admin_op_t *op)
{
	return be->ops && be->ops->reset && be->ops->refund &&
	       (op->verb != SLUICE_ADMIN_SET || be->ops->set) &&
	       (!op->conditional || be->ops->refund_if);
}

/* Runs op on the store; the answer follows when it answers. */
static void op_start(sluice_backend_t *be, admin_op_t *op)
{
	size_t i;

	sluice_conn_wait(op->c);
	op->now_us = sluice_now_us();
	/* Usage still under a limit a reload replaced moves first, so the
	 * verb covers it (a reset then forgets it: no later take carries
	 * it back; a set is not undone by a later carry). */
	for (i = 0; i < op->n; i++)
		sluice_verdict_carry(be, op->sets[i], op->m.key, op->m.keylen,
				     op->now_us);
	if (op->verb == SLUICE_ADMIN_SET) {
		set_now(op);
		return;
	}
	if (op->conditional) {
		/* No peek: a bucket gone full no longer holds the state, and
		 * the store answers 0 (409) for it. */
		int rc = be->ops->refund_if(be->impl, &op->items[0],
					    op->expected, op->now_us, op_done,
					    op);

		if (rc < 0)
			op_done(op, rc, 0);
		return;
	}
	/* First look whether any bucket holds state (peek_done() goes on
	 * with the verb). */
	build_peek(op);
	op->ipeek = 0;
	peek_next(op);
}

void sluice_api_admin(sluice_conn_t *c, int verb)
{
	sluice_backend_t *be = &c->svc->backend;
	admin_op_t *op;
	json_t *obj;

	if (!admin_gate(c))
		return;
	obj = sluice_api_object(c);
	if (!obj)
		return;
	op = op_read(c, obj, verb);
	json_decref(obj);
	if (!op)
		return;
	if (!store_can(be, op)) {
		free(op);
		sluice_resp_error(c, 501, "not_supported", NULL,
				  "this store has no reset, refund or set");
		return;
	}
	op_start(be, op);
}
