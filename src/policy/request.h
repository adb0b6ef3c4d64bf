/*
 * request.h -- a front end's request decided: its facts in, the answer and
 * its headers out, in one call each way.
 *
 * A front end gathers what it knows of the request (sluice_request_t: the
 * method and path it was sent with, its header fields, the peer), calls
 * sluice_decide_request() once, and writes what comes back in its own
 * protocol.  Everything between is the policy's: which request `proxy:`
 * says is being decided, the thread's take, the rules, the verdict over
 * the store (verdict.h), the thread's decision counters, and the answer's
 * rate-limit header lines and refusal body.  HTTP's /v1/check and /v1/take
 * (src/serve) and nginx's sluice_config (src/nginx) answer through here;
 * the Envoy RLS engine (envoy/rls.h) lends its takes from the same thread
 * (sluice_take_get()).
 */
#ifndef SLUICE_POLICY_REQUEST_H
#define SLUICE_POLICY_REQUEST_H

#include "policy/svc.h"
#include "util/buf.h"

/* What became of a request. */
typedef enum {
	SLUICE_ANSWER_ALLOWED = 0, /* no rule applies, or none refuses it */
	SLUICE_ANSWER_LIMITED,	   /* an enforcing rule refuses it */
	SLUICE_ANSWER_STORE_ERROR, /* a fail-closed rule's store failed */
} sluice_answer_kind_t;

/* The answer, valid during the callback only (its take then goes back to
 * the thread), unless the callback keeps it (sluice_answer_keep()). */
typedef struct sluice_answer_s {
	sluice_answer_kind_t kind;
	/* The rules' verdict (matches, results, verdict); NULL when no rule
	 * applies. */
	const sluice_take_t *take;

	/* private: the take itself, and where the callback's keeping of it
	 * is noted (NULL once kept) */
	sluice_take_t *own;
	int *kept;
} sluice_answer_t;

typedef void (*sluice_answer_cb)(void *arg, const sluice_answer_t *a);

/* Why a request could not be decided (sluice_decide_request() < 0). */
typedef struct sluice_decide_error_s {
	const char *field;   /* the header at fault, or NULL */
	const char *message; /* static text */
} sluice_decide_error_t;

/*
 * Decides the request that `req` describes, as seen by a proxy's check
 * (HTTP /v1/check): when `proxy:` names headers for the original method
 * and URI, those (a single line each) describe it, else req's own method
 * and path do; req->direct (a module inside the server, nginx's
 * sluice_config) decides req itself and reads no such header.  Its path
 * is taken without query or fragment.  req is read during the call only;
 * live is the config to decide with, valid until cb runs (a front end
 * holds a reference while an answer is pending); now_us the clock; the
 * store is svc->backend.  Each matching rule's outcome is counted in
 * svc->metrics (NULL: not counted; live->slots is then not read).  cb
 * runs exactly once, possibly before this returns (always, with a local
 * store or when no rule applies).  Returns 0, or (cb does not run, *err
 * says why) SLUICE_EINVAL when a header the proxy sets came on more than
 * one line, SLUICE_ENOMEM.
 */
int sluice_decide_request(sluice_svc_t *svc, const sluice_live_t *live,
			  const sluice_request_t *req, int64_t now_us,
			  sluice_answer_cb cb, void *arg,
			  sluice_decide_error_t *err);

/*
 * The same for a take the front end filled itself (POST /v1/take: one
 * match, from a configured rule or the take's scratch_rule) from
 * sluice_take_get(): decided, counted, answered, then given back.
 */
void sluice_decide_take(sluice_svc_t *svc, const sluice_live_t *live,
			sluice_take_t *t, int64_t now_us, sluice_answer_cb cb,
			void *arg);

/*
 * Called from the callback only: keeps answer a past it, in *out, with its
 * take, for a front end that reads it later or may give its tokens back
 * (sluice_answer_refund(): nginx, when its own limits then refuse the
 * request).  *out stays valid until sluice_answer_release(), which gives
 * the take back to the thread of the sluice_decide_request() call.  A
 * NULL a->take (no rule applied) keeps nothing to release.
 */
void sluice_answer_keep(const sluice_answer_t *a, sluice_answer_t *out);
void sluice_answer_release(sluice_answer_t *a);

/*
 * Gives back, on the store, what the kept answer a (SLUICE_ANSWER_ALLOWED)
 * charged to its enforcing rules (sluice_verdict_refund()): for a front
 * end whose other limits then refuse the request, charged all or nothing.
 */
void sluice_answer_refund(sluice_answer_t *a, int64_t now_us);

/* Appends the answer's rate-limit header lines ("Name: value\r\n" each,
 * sluice_verdict_header_lines()); nothing when no rule decided. */
void sluice_answer_headers(const sluice_answer_t *a, sluice_buf_t *out);

/* Appends the body of a refusal (SLUICE_ANSWER_LIMITED):
 * {"error":"rate_limited","retry_after_ms":N,"policy":"name"}. */
void sluice_answer_limited_body(const sluice_answer_t *a, sluice_buf_t *out);

/* The decision the answer reports (the most restrictive enforcing
 * rule's, or a shadow rule's when only those decided), or NULL when no
 * rule produced one. */
const sluice_decision_t *sluice_answer_decision(const sluice_answer_t *a);

/* The policy name (sluice_policy_name()) of the rule whose decision the
 * answer reports, into name (size len); "" when none. */
void sluice_answer_policy(const sluice_answer_t *a, char *name, size_t len);

/* How long the reported rule asks the client to wait before it allows
 * again (sluice_retry_us()), in µs; 0 when no rule reported. */
uint64_t sluice_answer_retry_us(const sluice_answer_t *a);

/*
 * The shadow rules that would have refused the request, one a call: from
 * match *i on, the next one's policy name goes into name (size len), *i
 * past it, and 1 is returned; 0 when none is left.  Start with *i = 0.
 */
int sluice_answer_shadow_limited(const sluice_answer_t *a, size_t *i,
				 char *name, size_t len);

/*
 * The thread's take (svc->spare), lent to one request at a time, or a new
 * one while it is out (NULL when out of memory); sluice_take_put() gives
 * it back, with its verdict delivered, or frees one of its own.
 */
sluice_take_t *sluice_take_get(sluice_svc_t *svc);
void sluice_take_put(sluice_svc_t *svc, sluice_take_t *t);

#endif /* SLUICE_POLICY_REQUEST_H */
