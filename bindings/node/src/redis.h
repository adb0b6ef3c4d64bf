/*
 * redis.h -- what redis.c (the Redis client on Node's loop, its calls and
 * their delivery) shares with wait.c (reservations and their conditional
 * refund on that client).
 */
#ifndef SLUICE_ADDON_REDIS_H
#define SLUICE_ADDON_REDIS_H

#include "addon.h"

#include <uv.h>

/*
 * One Redis client on Node's loop.  While open it holds a strong
 * reference to its JS owner (like an open socket, it is not collected
 * while it may still call back) and keeps the loop alive through its
 * connections; close() releases both, so the process may exit.
 */
typedef struct rcall_s rcall_t;

typedef struct rclient_s {
	sluice_backend_t be;
	/* Where the store's events go: this client (on_event below), not
	 * the process (each Limiter hears its own nodes). */
	sluice_store_events_t events;
	napi_env env;
	napi_async_context actx;
	napi_ref owner;
	/* The owner's answer table: ANSWER_FIELDS numbers per answer, read
	 * by owner._answers(n) (a Float64Array the owner holds; referenced
	 * here so it lives as long as the client). */
	napi_ref answers_ref;
	napi_ref answers_fn; /* owner._answers, looked up once */
	double *answers;
	size_t answers_cap; /* in answers */
	/* Answers wait here until the loop's check phase (or the next
	 * turn's idle phase, when one came outside the poll phase), then
	 * are all delivered under one callback scope: one microtask and
	 * nextTick checkpoint per batch, not one per reply. */
	rcall_t *q_head, *q_tail;
	uv_check_t check;
	uv_idle_t idle;
	int handles_open; /* check and idle not yet closed */
	int flushing;
	/* Calls done with, kept for the next ones (RCALL_POOL_MAX at most,
	 * none once closed): no malloc and free per call. */
	rcall_t *pool;
	unsigned npool;
	/* Until the client has released its handles, the environment must
	 * not go away (a worker's loop stops, the addon may be unloaded):
	 * an async cleanup hook holds it. */
	napi_async_cleanup_hook_handle hook;
	int closed;    /* close() ran: later calls are refused */
	int teardown;  /* the environment is going away: no JS */
	int released;  /* the client's memory is released */
	int finalized; /* the JS external is gone */
	/* The last failure a node reported ("node: tls_failed: reason"),
	 * "" once that node answers again: the why of a failed take. */
	char why[320];
	char why_node[128];
	/* Its kind, so a failed take's error can carry a code saying it
	 * (ERR_SLUICE_REFUSED); 0 with no why. */
	int why_kind;
	/* The state token of each reservation answered (wait.c), by call
	 * id, read by JS with redisToken(client, id) while it handles that
	 * answer; grown as ids are. */
	char (*tokens)[ADDON_TOKEN_MAX];
	uint32_t ntokens;
} rclient_t;

/* One call waiting for its answer, then for its delivery.  id names the
 * call's slot on the JS side: no reference or function per call.  The
 * item (its key and limits copied after the struct) is the store's until
 * the answer (store.h: borrowed), so a policy the app drops meanwhile
 * does not matter. */
struct rcall_s {
	rclient_t *c;
	uint32_t id;
	rcall_t *next;
	int status;
	int allowed;
	int admin;  /* an admin call: no decision */
	int pooled; /* of RCALL_POOL_TAIL: goes back to the client's pool */
	double nums[DECISION_FIELDS];
	sluice_take_item_t item;
	sluice_limit_t limits[]; /* item.nlimits, then the key */
};

/*
 * A call of client c on (key, policy p, n), answered as row `id` (a
 * uint32): its item holds copies of the key and the limits.  NULL with
 * an exception pending when the limiter is closed or memory is short.
 */
rcall_t *rclient_new_call(napi_env env, rclient_t *c, const policy_t *p,
			  const char *key, size_t keylen, uint64_t n,
			  napi_value id, int admin);

/* What the JS call returns once the store's verb ran on `call` and
 * returned rc: on a failure (rc < 0, no answer will come) the call goes
 * back to its client and the error is thrown.  NULL (undefined) always. */
napi_value rclient_sent(napi_env env, rcall_t *call, int rc);

/* The store's answer to a call (store.h's sluice_store_cb): a take's
 * decision as numbers; an admin call's allowed (a conditional refund's
 * "refunded") with no numbers.  Then the queue. */
void rclient_on_answer(void *arg, int status, int allowed);
/* A call done with (never sent, or delivered). */
void rclient_put_call(rclient_t *c, rcall_t *call);
/* An answered call joins the queue delivered to JS. */
void rclient_enqueue(rclient_t *c, rcall_t *call);

#endif
