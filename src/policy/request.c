/*
 * request.c -- a front end's request decided (see request.h): the
 * original request `proxy:` describes, the thread's take, the rules'
 * verdict, its counting and the answer's headers and body.
 *
 * The walk of one request: the front end's facts come in through
 * sluice_decide_request(); the rules match them into the take; the verdict
 * engine charges the store (verdict.h: the store is reached from there
 * alone) and comes back to on_verdict(), which counts the outcome, hands
 * the answer to the front end's callback and puts the take back.
 */
#include "policy/request.h"
#include "policy/ratelimit_headers.h"
#include "util/invariant.h"
#include "util/log.h"

#include <stdatomic.h>
#include <string.h>

/* ------------------------------------------------------ the thread's take */

sluice_take_t *sluice_take_get(sluice_svc_t *svc)
{
	if (svc->spare && !svc->spare_lent) {
		svc->spare_lent = 1;
		return svc->spare;
	}
	return sluice_take_new();
}

void sluice_take_put(sluice_svc_t *svc, sluice_take_t *t)
{
	/* Given back once, with its verdict delivered (or never decided). */
	SLUICE_ASSERT(t && t->pending == 0);
	if (t == svc->spare) {
		SLUICE_ASSERT(svc->spare_lent);
		svc->spare_lent = 0;
	} else {
		sluice_take_free(t);
	}
}

/* -------------------------------------------------- the original request */

/* The index-th line of header `name`: by req->header_line, or without it
 * the one line req->header gives. */
static const char *header_line(const sluice_request_t *req, const char *name,
			       size_t index, size_t *len)
{
	if (req->header_line)
		return req->header_line(req->header_ctx, name, index, len);
	return index == 0 ? req->header(req->header_ctx, name, len) : NULL;
}

/*
 * The value of header `name` (NULL name or no such header: *out NULL).
 * Sent on two lines it is refused: which line the proxy wrote depends on
 * the proxy (one that appends instead of replacing leaves the client's
 * first), and a guess would let the client pick the path.
 */
static int origin_header(const sluice_request_t *req, const char *name,
			 const char **out, size_t *len,
			 sluice_decide_error_t *err)
{
	size_t len2;

	*out = NULL;
	*len = 0;
	if (!name)
		return 0;
	if (header_line(req, name, 1, &len2)) {
		err->field = name;
		err->message = "sent on more than one line: the proxy must set "
			       "it, replacing the client's";
		return SLUICE_EINVAL;
	}
	*out = header_line(req, name, 0, len);
	if (*out && *len == 0)
		*out = NULL;
	return 0;
}

/* The configured URI header is missing but another proxy kind's is there:
 * most likely `proxy:` does not name the proxy in front (or a client
 * sent it).  It is not used; say so once, for the operator. */
static void warn_other_proxy(const sluice_request_t *req, const char *uh)
{
	static const char *const known[] = {"x-original-uri",
					    "x-forwarded-uri"};
	static atomic_int warned;
	size_t i, len;

	for (i = 0; i < 2; i++)
		if (strcmp(known[i], uh) != 0 &&
		    req->header(req->header_ctx, known[i], &len) &&
		    !atomic_exchange(&warned, 1))
			sluice_log_warn(
				"/v1/check: a request has %s but no %s, which "
				"`proxy:` names; %s is not used (set proxy: "
				"forward_auth behind Traefik or Caddy "
				"forward_auth, nginx behind nginx "
				"auth_request)",
				known[i], uh, known[i]);
}

/* The request being decided: from the headers `proxy:` names (and only
 * those: another proxy's headers may be the client's own), else the
 * check request's own method and path (always for a direct one, whose
 * client may send any header); its path without query or fragment. */
static int original(const sluice_config_t *cfg, const sluice_request_t *in,
		    sluice_request_t *out, sluice_decide_error_t *err)
{
	const char *mh, *uh, *method, *uri;
	size_t len, ulen, i;

	mh = uh = NULL;
	if (!in->direct)
		sluice_config_proxy_headers(cfg, &mh, &uh);
	if (origin_header(in, mh, &method, &len, err) < 0 ||
	    origin_header(in, uh, &uri, &ulen, err) < 0)
		return SLUICE_EINVAL;
	*out = *in;
	if (method) {
		out->method = method;
		out->method_len = len;
	}
	if (!uri) {
		if (uh)
			warn_other_proxy(in, uh);
		uri = in->path;
		ulen = in->path_len;
	}
	out->path = uri;
	out->path_len = ulen;
	for (i = 0; i < ulen; i++)
		if (uri[i] == '?' || uri[i] == '#') {
			out->path_len = i;
			break;
		}
	return 0;
}

/* ------------------------------------------------------------- deciding */

/* Counts the outcome of every matched rule in the thread's metrics. */
static void count_verdict(sluice_metrics_t *m, const sluice_live_t *live,
			  const sluice_take_t *t)
{
	size_t i;

	for (i = 0; i < t->nmatches; i++) {
		const sluice_match_result_t *r = &t->results[i];
		const sluice_rule_t *rule = t->matches[i].rule;
		size_t slot = rule == &t->scratch_rule
				      ? SLUICE_METRIC_ADHOC
				      : live->slots[sluice_live_rule_index(
						live, rule)];

		SLUICE_ASSERT(slot < SLUICE_METRIC_SLOTS);
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

static void on_verdict(void *arg, const sluice_verdict_t *v)
{
	sluice_take_t *t = arg;
	sluice_svc_t *svc = t->svc;
	sluice_answer_t a;

	int kept = 0;

	SLUICE_ASSERT(t->finished && v == &t->verdict);
	if (svc->metrics)
		count_verdict(svc->metrics, t->live, t);
	a.kind = v->status    ? SLUICE_ANSWER_STORE_ERROR
		 : v->allowed ? SLUICE_ANSWER_ALLOWED
			      : SLUICE_ANSWER_LIMITED;
	a.take = t;
	a.own = t;
	a.kept = &kept;
	/* The front end may free what arg points to: nothing of it after.
	 * A take it kept goes back at sluice_answer_release(). */
	t->answer_cb(t->answer_arg, &a);
	if (!kept)
		sluice_take_put(svc, t);
}

void sluice_decide_take(sluice_svc_t *svc, const sluice_live_t *live,
			sluice_take_t *t, int64_t now_us, sluice_answer_cb cb,
			void *arg)
{
	t->svc = svc;
	t->live = live;
	t->answer_cb = cb;
	t->answer_arg = arg;
	sluice_verdict_decide(&svc->backend, t, now_us, on_verdict, t);
}

int sluice_decide_request(sluice_svc_t *svc, const sluice_live_t *live,
			  const sluice_request_t *req, int64_t now_us,
			  sluice_answer_cb cb, void *arg,
			  sluice_decide_error_t *err)
{
	sluice_request_t orig;
	sluice_answer_t a;
	sluice_take_t *t;

	if (original(live->cfg, req, &orig, err) < 0)
		return SLUICE_EINVAL;
	t = sluice_take_get(svc);
	if (!t || sluice_take_match(t, live->cfg, &orig) < 0) {
		if (t)
			sluice_take_put(svc, t);
		err->field = NULL;
		err->message = "out of memory";
		return SLUICE_ENOMEM;
	}
	if (t->nmatches == 0) {
		/* No rule applies: nothing to limit, nothing to count. */
		sluice_take_put(svc, t);
		memset(&a, 0, sizeof(a));
		a.kind = SLUICE_ANSWER_ALLOWED;
		cb(arg, &a);
		return 0;
	}
	sluice_decide_take(svc, live, t, now_us, cb, arg);
	return 0;
}

/* ------------------------------------------------------------ answering */

void sluice_answer_keep(const sluice_answer_t *a, sluice_answer_t *out)
{
	*out = *a;
	out->kept = NULL;
	if (a->own) {
		/* Only from the callback: on_verdict() then leaves it. */
		SLUICE_ASSERT(a->kept && !*a->kept);
		*a->kept = 1;
	}
}

void sluice_answer_release(sluice_answer_t *a)
{
	if (a->own)
		sluice_take_put(a->own->svc, a->own);
	a->own = NULL;
	a->take = NULL;
}

void sluice_answer_refund(sluice_answer_t *a, int64_t now_us)
{
	sluice_take_t *t = a->own;

	/* A kept answer: its take is the front end's until released. */
	SLUICE_ASSERT(t && a->kept == NULL);
	sluice_verdict_refund(&t->svc->backend, t, now_us);
}

void sluice_answer_headers(const sluice_answer_t *a, sluice_buf_t *out)
{
	if (a->take)
		sluice_verdict_header_lines(out, a->take, &a->take->verdict);
}

const sluice_decision_t *sluice_answer_decision(const sluice_answer_t *a)
{
	if (!a->take || a->take->verdict.report < 0)
		return NULL;
	return &a->take->verdict.summary;
}

void sluice_answer_policy(const sluice_answer_t *a, char *name, size_t len)
{
	if (len)
		name[0] = '\0';
	if (a->take && a->take->verdict.report >= 0)
		sluice_policy_name(&a->take->matches[a->take->verdict.report],
				   name, len);
}

uint64_t sluice_answer_retry_us(const sluice_answer_t *a)
{
	const sluice_verdict_t *v;
	const sluice_match_t *m;

	if (!a->take || a->take->verdict.report < 0)
		return 0;
	v = &a->take->verdict;
	m = &a->take->matches[v->report];
	return sluice_retry_us(&m->set->limits[v->which], &v->summary);
}

int sluice_answer_shadow_limited(const sluice_answer_t *a, size_t *i,
				 char *name, size_t len)
{
	const sluice_take_t *t = a->take;

	for (; t && *i < t->nmatches; (*i)++)
		if (t->matches[*i].rule->shadow &&
		    t->results[*i].outcome == SLUICE_OUT_LIMITED) {
			sluice_policy_name(&t->matches[*i], name, len);
			(*i)++;
			return 1;
		}
	return 0;
}

void sluice_answer_limited_body(const sluice_answer_t *a, sluice_buf_t *out)
{
	char name[256];

	/* A refusal always reports the enforcing rule that refused. */
	SLUICE_ASSERT(a->kind == SLUICE_ANSWER_LIMITED && a->take &&
		      a->take->verdict.report >= 0);
	sluice_answer_policy(a, name, sizeof(name));
	sluice_limited_body(out, name, sluice_answer_retry_us(a));
}
