/*
 * call.c -- a call's life, from start to answer: its deadline, the
 * circuit breaker in front of it, sending it on a usable connection,
 * redirections and retries, and answering its caller once.
 *
 * Deadlines: every call gets the same timeout, so the pending list in
 * arrival order is also in deadline order, and one uv timer armed for the
 * oldest deadline expires them all (no timer per call).  A call that times
 * out is answered SLUICE_ETIMEDOUT at once; its command may still be in the
 * connection's pipeline, so it keeps counting against the connection's
 * in-flight cap until Redis answers or the connection is dropped.  A
 * connection that keeps timing out is declared stuck and reopened.
 *
 * The breaker: SLUICE_REDIS_BREAKER_FAILURES consecutive failures open it;
 * while open, calls fail fast (SLUICE_ESTORE) without touching Redis; after
 * SLUICE_REDIS_BREAKER_OPEN_MS one probe call goes through (half-open) and
 * its outcome closes or reopens it.  Any success closes it.  There is one
 * breaker per node, guarding the calls routed to it: in a cluster, a dead
 * master opens its own breaker and fails its own slots' calls, while the
 * other masters' keys are decided as usual.
 */
#include "store/redis/redis_int.h"
#include "util/invariant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The clock for deadlines: the real monotonic time, not the loop's cached
 * clock (sluice_redis__now()), which lags behind on a busy loop and would
 * make calls time out early. */
static uint64_t clock_ms(void)
{
	return sluice_redis__hrtime() / 1000000;
}

/* ------------------------------------------------------------ breaker */

static void breaker_success(sluice_redis_t *r, sluice_redis_node_t *n)
{
	if (n->breaker_told) {
		n->breaker_told = 0;
		sluice_redis__event(r, n, SLUICE_REDIS_EV_BREAKER_CLOSED, "");
	}
	n->failures = 0;
	n->breaker = BREAKER_CLOSED;
	n->probing = 0;
	n->refusals = 0;
	n->refusal[0] = '\0';
}

static void breaker_failure(sluice_redis_t *r, sluice_redis_node_t *n,
			    int probe)
{
	uint64_t now = sluice_redis__now(r);

	if (probe)
		n->probing = 0;
	if (n->breaker == BREAKER_OPEN && !probe)
		return;
	if (probe || ++n->failures >= SLUICE_REDIS_BREAKER_FAILURES) {
		n->breaker = BREAKER_OPEN;
		n->open_until_ms = now + SLUICE_REDIS_BREAKER_OPEN_MS;
		/* Reported when it opens, not at each failed probe. */
		if (!n->breaker_told) {
			n->breaker_told = 1;
			sluice_redis__event(r, n, SLUICE_REDIS_EV_BREAKER_OPEN,
					    "consecutive calls failed");
		}
	}
}

/* 1 when a new call may go to the node it is routed to; marks the
 * half-open probe. */
static int breaker_admit(sluice_redis_t *r, sluice_redis_call_t *c)
{
	sluice_redis_node_t *n = c->guard;

	if (n->breaker == BREAKER_CLOSED)
		return 1;
	if (n->breaker == BREAKER_OPEN &&
	    sluice_redis__now(r) >= n->open_until_ms) {
		n->breaker = BREAKER_HALF_OPEN;
		n->probing = 0;
	}
	if (n->breaker == BREAKER_HALF_OPEN && !n->probing) {
		n->probing = 1;
		c->probe = 1;
		return 1;
	}
	return 0;
}

/* ---------------------------------------------------------------- calls */

static void call_unlink(sluice_redis_call_t *c)
{
	sluice_redis_t *r = c->r;

	if (c->prev)
		c->prev->next = c->next;
	else if (r->head == c)
		r->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else if (r->tail == c)
		r->tail = c->prev;
	c->prev = c->next = NULL;
	/* Unref'd, the client holds the loop only while calls wait: the
	 * sweep (their deadline) goes with the last one. */
	if (!r->head && (r->flags & SLUICE_REDIS_UNREF) && !r->closing)
		sluice_redis__timer_stop(r, r->sweep);
}

static void call_maybe_free(sluice_redis_call_t *c)
{
	/* Freed only once finished (the caller answered), and only by the
	 * last holder: no command in flight, not on the retry list. */
	SLUICE_ASSERT(c->done);
	if (c->done && !c->refs && !c->waiting)
		free(c);
}

/* Answers the caller (once).  reply is the decision when status is 0. */
void sluice_redis__finish(sluice_redis_call_t *c, int status,
			  const redisReply *reply)
{
	sluice_redis_t *r = c->r;
	sluice_redis_outcome_t out;

	if (c->done)
		return;
	SLUICE_ASSERT(c->shape && c->shape->parse && c->shape->done);
	memset(&out, 0, sizeof(out));
	if (status == 0 && c->shape->parse(c, reply, &out) < 0) {
		status = SLUICE_ESTORE;
		c->fail = SLUICE_REDIS_ERR_PROTOCOL;
	}
	c->done = 1;
	call_unlink(c);
	if (status == 0)
		breaker_success(r, c->guard);
	else if (status != SLUICE_ENOMEM)
		breaker_failure(r, c->guard, c->probe);
	else if (c->probe)
		c->guard->probing = 0;
	/* After the breaker's update, so the gauges it carries are fresh. */
	if (r->on_report && status != SLUICE_ENOMEM)
		sluice_redis__report(r, c->conn ? c->conn->node : c->guard,
				     SLUICE_REDIS_REPORT_CALL,
				     sluice_redis__hrtime() - c->start_ns,
				     status == 0 ? SLUICE_REDIS_ERR_NONE
				     : status == SLUICE_ETIMEDOUT
					     ? SLUICE_REDIS_ERR_TIMEOUT
				     : c->fail ? c->fail
					       : SLUICE_REDIS_ERR_CONNECTION);
	c->shape->done(c, status, status == 0 ? &out : NULL);
	call_maybe_free(c);
}

/* Fails a call that never reached Redis; does not count against the
 * breaker when the breaker itself refused it. */
static void call_fail_fast(sluice_redis_call_t *c, int count)
{
	c->done = 1;
	call_unlink(c);
	if (count)
		breaker_failure(c->r, c->guard, c->probe);
	else if (c->probe)
		c->guard->probing = 0;
	c->shape->done(c, SLUICE_ESTORE, NULL);
	call_maybe_free(c);
}

static int is_error(const redisReply *rep, const char *prefix)
{
	size_t n = strlen(prefix);

	return rep->len >= n && memcmp(rep->str, prefix, n) == 0;
}

static int send_on(sluice_redis_conn_t *k, sluice_redis_call_t *c, int script);

/* The server answered the call with an error that no retry cures (an
 * unknown or renamed command, an ACL, maxmemory, a script error): its
 * words (redacted as they were read, reply.c) become the node's last
 * error and an event, once per change of those words and at most once a
 * second, so that a Redis refusing every decision is said plainly rather
 * than as a bare open breaker. */
static void refused(sluice_redis_call_t *c, sluice_redis_node_t *n,
		    const redisReply *rep)
{
	uint64_t now = sluice_redis__now(c->r);

	c->fail = is_error(rep, "NOPERM") ? SLUICE_REDIS_ERR_NOPERM
		  : is_error(rep, "OOM")  ? SLUICE_REDIS_ERR_OOM
					  : SLUICE_REDIS_ERR_REFUSED;
	n->refusals++;
	sluice_redis__node_error(n, rep->str);
	if (strncmp(n->refusal, rep->str, sizeof(n->refusal) - 1) == 0 ||
	    (n->refusal_told_ms && now - n->refusal_told_ms < 1000))
		return;
	snprintf(n->refusal, sizeof(n->refusal), "%s", rep->str);
	n->refusal_told_ms = now ? now : 1;
	sluice_redis__event(c->r, n, SLUICE_REDIS_EV_REFUSED, rep->str);
}

/* A reply (or NULL: the link went away) to one command sent on l. */
static void conn_answered(sluice_redis_conn_t *k, sluice_redis_link_t *l,
			  const redisReply *rep)
{
	if (k && k->link == l) {
		if (k->inflight)
			k->inflight--;
		if (rep) {
			k->stuck = 0;
			k->last_reply_ms = sluice_redis__now(k->r);
		}
	}
}

/* Call c's link went away before its reply: on Sentinel, a master that
 * moved with the call in flight on the old one (its write there, if made,
 * is lost when the old master is made a replica) leaves the new master to
 * decide it, within the deadline; else the call fails. */
static void call_lost(sluice_redis_call_t *c)
{
	if (c->r->sentinel && c->r->nodes[0]->moving &&
	    clock_ms() < c->deadline_ms) {
		c->redirects = 0;
		sluice_redis__retry_later(c);
		return;
	}
	sluice_redis__finish(c, SLUICE_ESTORE, NULL);
}

/* Redis answered call c with an error: 1 when a retry cures it (the call
 * sent again, now or later, and answered then), 0 when it is refused. */
static int call_retried(sluice_redis_conn_t *k, sluice_redis_link_t *l,
			sluice_redis_call_t *c, const redisReply *rep)
{
	if (is_error(rep, "NOSCRIPT") && k && k->link == l &&
	    ++c->redirects <= SLUICE_REDIS_MAX_REDIRECTS) {
		/* Reload, then the same call behind it on the same pipe. */
		uint64_t now = sluice_redis__now(c->r);

		c->r->noscript++;
		/* Every call in flight sees NOSCRIPT after a flush: report
		 * it once a second at most. */
		if (!k->node->noscript_told_ms ||
		    now - k->node->noscript_told_ms >= 1000) {
			k->node->noscript_told_ms = now ? now : 1;
			sluice_redis__event(c->r, k->node,
					    SLUICE_REDIS_EV_SCRIPT_RELOADED,
					    "NOSCRIPT: the server lost the "
					    "scripts");
		}
		sluice_redis__load_script(k, NULL);
		if (send_on(k, c, 1) == 0)
			return 1;
	} else if (is_error(rep, "MOVED ") || is_error(rep, "ASK ")) {
		if (sluice_redis__redirect(c, rep)) {
			sluice_redis__send(c);
			return 1;
		}
	} else if (is_error(rep, "READONLY") && c->r->sentinel) {
		/* A master demoted under us: ask the Sentinels where the
		 * master is now and resend there, within the deadline.  The
		 * deadline alone bounds the retries (the sweep ends a call
		 * waiting past it): a count of them would end the call while
		 * the Sentinels' answer is still on its way, however long the
		 * caller said it may wait (it did, on a busy machine, after
		 * 20 tries in 100 ms of a 500 ms deadline). */
		sluice_redis__sentinel_lost(c->r, rep->str);
		c->redirects = 0;
		if (clock_ms() < c->deadline_ms) {
			sluice_redis__retry_later(c);
			return 1;
		}
	} else if (is_error(rep, "TRYAGAIN") || is_error(rep, "CLUSTERDOWN") ||
		   is_error(rep, "LOADING")) {
		/* Slot mid-migration (its keys split between two nodes until
		 * the next batch moves), cluster or server warming up: retry
		 * every SLUICE_REDIS_RETRY_MS for as long as the call may
		 * wait.  As with READONLY, the deadline alone bounds it: a
		 * count of tries (20, about 100 ms) gave up in the middle of
		 * a migration on a busy machine.  Nor do these retries use
		 * up the call's redirections: the ASK that follows them once
		 * the keys have moved is followed. */
		c->redirects = 0;
		if (clock_ms() < c->deadline_ms) {
			sluice_redis__retry_later(c);
			return 1;
		}
	} else if (k && k->module == 1 &&
		   is_error(rep, "ERR unknown command")) {
		/* The module was unloaded: back to the script. */
		k->module = 0;
		sluice_redis__send(c);
		return 1;
	}
	return 0;
}

/* What Redis answered for call c (its own reply, or its element of a
 * batch's; NULL when the link went away) on connection k's link l. */
static void call_answer(sluice_redis_conn_t *k, sluice_redis_link_t *l,
			sluice_redis_call_t *c, const redisReply *rep)
{
	SLUICE_ASSERT(c->refs > 0); /* one per command sent carrying it */
	c->refs--;
	if (c->done || c->r->closing) {
		if (!c->done)
			sluice_redis__finish(c, SLUICE_ESTORE, NULL);
		call_maybe_free(c);
		return;
	}
	if (!rep) {
		call_lost(c);
		return;
	}
	if (rep->type != REDIS_REPLY_ERROR) {
		sluice_redis__finish(c, 0, rep);
		return;
	}
	if (call_retried(k, l, c, rep))
		return;
	refused(c, k && k->link == l ? k->node : c->guard, rep);
	sluice_redis__finish(c, SLUICE_ESTORE, NULL);
}

static void on_reply(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	sluice_redis_conn_t *k = l->data;

	conn_answered(k, l, rep);
	call_answer(k, l, priv, rep);
}

/* Puts the call on k's pipeline, as a script call or a module command
 * (ASKING first when the call was redirected so); 0 or -1. */
static int send_on(sluice_redis_conn_t *k, sluice_redis_call_t *c, int script)
{
	sluice_redis_resp_t o;
	int rc = -1;

	c->script = script;
	sluice_redis__resp_init(&o);
	/* An import and a conditional refund write a quota's state
	 * themselves (import.lua, refund_if.lua). */
	if (script && c->adjust != SLUICE_REDIS_ADJUST_IMPORT &&
	    !c->refund_if && sluice_redis__has_quota(c->limits, c->nlimits))
		sluice_redis__quota_command(c, &o);
	else if (script)
		sluice_redis__script_command(k->r, c, &o);
	else
		sluice_redis__module_command(c, &o);
	if (!o.failed &&
	    (!c->ask ||
	     sluice_redis__command(k->link, NULL, NULL, "ASKING") == 0) &&
	    sluice_redis__link_send(k->link, on_reply, c, o.buf, o.len) == 0) {
		c->ask = NULL;
		c->conn = k;
		c->refs++;
		k->inflight++;
		rc = 0;
	}
	sluice_redis__resp_free(&o);
	return rc;
}

/* ------------------------------------------------------------ batches */

/*
 * Takes for one connection, gathered while the loop handles one turn's
 * events and sent as one SLUICE.TAKEEACH / SLUICE.TAKEMANY when the turn
 * ends (the client's prepare handle, `gather`): Redis then reads,
 * dispatches and answers one command for all of them, which costs it
 * less per decision than one SLUICE.TAKE each.  Only what one such
 * command can carry is gathered: a take of one key under one limit
 * (peeks, several limits and several keys go alone), for a connection
 * whose server has SLUICE.TAKEMANY, and in a cluster only takes of one
 * slot (a take of another slot sends the batch so far and starts the
 * next one).  Each take stays a call of
 * its own: its deadline, its breaker, its answer, its error (an error
 * for the whole command, such as MOVED, is handled for each take as if
 * it had been its own reply).  A batch holds a reference to each call
 * (c->refs) from the moment the take joins it until its reply.
 */
typedef struct sluice_redis_batch_s {
	size_t n, cap;
	int slot;
	sluice_redis_call_t *calls[];
} batch_t;

static void on_batch_reply(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	sluice_redis_conn_t *k = l->data;
	batch_t *b = priv;
	size_t i;
	int each =
		rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == b->n;

	conn_answered(k, l, rep);
	/* The batch counted as b->n commands in flight (the cap of
	 * sluice_redis__pick() bounds takes, batched or not). */
	if (k && k->link == l)
		k->inflight -= k->inflight < b->n - 1 ? k->inflight
						      : (unsigned)(b->n - 1);
	/* Not an array of one answer per take: an error for all of them
	 * (or NULL), or a reply they do not understand (protocol error). */
	for (i = 0; i < b->n; i++)
		call_answer(k, l, b->calls[i], each ? rep->element[i] : rep);
	free(b);
}

static void batch_unlist(sluice_redis_t *r, sluice_redis_conn_t *k)
{
	sluice_redis_conn_t **p = &r->batches;

	while (*p && *p != k)
		p = &(*p)->batch_next;
	if (*p)
		*p = k->batch_next;
	k->batch_next = NULL;
}

/* Sends k's gathered takes now as one command (flush: write it at once,
 * from the end of the turn); a take alone goes as SLUICE.TAKE, and
 * takes whose connection went away meanwhile are routed again. */
static void batch_send(sluice_redis_conn_t *k, int flush)
{
	sluice_redis_t *r = k->r;
	batch_t *b = k->open_batch;
	sluice_redis_resp_t o;
	size_t i, live = 0;
	int fit;

	if (!b)
		return;
	k->open_batch = NULL;
	batch_unlist(r, k);
	/* The callbacks below may gather new takes on k: b is ours now. */
	for (i = 0; i < b->n; i++) {
		sluice_redis_call_t *c = b->calls[i];

		if (c->done) {
			SLUICE_ASSERT(c->refs > 0);
			c->refs--;
			call_maybe_free(c);
		} else {
			b->calls[live++] = c;
		}
	}
	b->n = live;
	fit = k->link && k->state != CONN_DOWN && k->module == 1 &&
	      k->batch != SLUICE_REDIS_BATCH_NONE;
	if (live && !fit) {
		/* The connection went away or lost the module meanwhile:
		 * each take is routed again (never to k as a batch). */
		for (i = 0; i < live; i++) {
			SLUICE_ASSERT(b->calls[i]->refs > 0);
			b->calls[i]->refs--;
			b->calls[i]->conn = NULL;
			sluice_redis__send(b->calls[i]);
		}
		live = 0;
	}
	if (live == 1) {
		/* Alone: as SLUICE.TAKE. */
		SLUICE_ASSERT(b->calls[0]->refs > 0);
		b->calls[0]->refs--;
		if (send_on(k, b->calls[0], 0) < 0)
			sluice_redis__finish(b->calls[0], SLUICE_ESTORE, NULL);
		else if (flush)
			sluice_redis__link_flush(k->link);
		live = 0;
	}
	if (!live) {
		free(b);
		return;
	}
	sluice_redis__resp_init(&o);
	sluice_redis__module_batch_command(b->calls, live, k->batch, &o);
	if (!o.failed && sluice_redis__link_send(k->link, on_batch_reply, b,
						 o.buf, o.len) == 0) {
		k->inflight += (unsigned)live;
		if (flush)
			sluice_redis__link_flush(k->link);
		b = NULL;
	}
	sluice_redis__resp_free(&o);
	if (b) {
		for (i = 0; i < live; i++) {
			SLUICE_ASSERT(b->calls[i]->refs > 0);
			b->calls[i]->refs--;
			sluice_redis__finish(b->calls[i], SLUICE_ESTORE, NULL);
		}
		free(b);
	}
}

static void on_gather(void *arg)
{
	sluice_redis_t *r = arg;

	r->loop->ops->hook_stop(r->gather);
	while (r->batches)
		batch_send(r->batches, 1);
}

/* Gathers c (a take of one key and one limit) for k's next batch; 0, or
 * -1 when it must go alone. */
static int batch_add(sluice_redis_conn_t *k, sluice_redis_call_t *c)
{
	sluice_redis_t *r = k->r;
	batch_t *b;

	/* In a cluster one command serves one slot: a take of another slot
	 * sends the batch so far and starts the next. */
	while ((b = k->open_batch) && r->cluster && b->slot != c->slot)
		batch_send(k, 0);
	if (!b) {
		b = malloc(sizeof(*b) + 16 * sizeof(b->calls[0]));
		if (!b)
			return -1;
		b->n = 0;
		b->cap = 16;
		b->slot = c->slot;
		k->open_batch = b;
		k->batch_next = r->batches;
		r->batches = k;
		if (!r->loop->ops->hook_active(r->gather))
			r->loop->ops->hook_start(r->gather);
	} else if (b->n == b->cap) {
		batch_t *grown = realloc(
			b, sizeof(*b) + 2 * b->cap * sizeof(b->calls[0]));

		if (!grown)
			return -1;
		b = k->open_batch = grown;
		b->cap *= 2;
	}
	b->calls[b->n++] = c;
	c->refs++;
	c->conn = k;
	c->script = 0;
	if (b->n == SLUICE_REDIS_BATCH_MAX)
		batch_send(k, 0);
	return 0;
}

/* A take that one batched command can carry, to a server that has it. */
static int batchable(const sluice_redis_conn_t *k, const sluice_redis_call_t *c)
{
	return k->module == 1 && k->batch != SLUICE_REDIS_BATCH_NONE &&
	       !(c->r->flags & SLUICE_REDIS_NO_BATCH) && !c->mk && !c->peek &&
	       !c->reserve && !c->refund_if && !c->ask && c->nlimits == 1;
}

static void on_retry(void *arg);
static void on_sweep(void *arg);

int sluice_redis__calls_init(sluice_redis_t *r)
{
	r->wake_retry = sluice_redis__wake_retry;
	r->sweep = sluice_redis__timer_new(r, on_sweep, r, 0);
	r->retry = sluice_redis__timer_new(r, on_retry, r, 0);
	/* Before the loop waits: the takes of the whole turn. */
	r->gather = r->loop->ops->hook_new(r->loop, on_gather, r, 0);
	if (r->gather)
		r->open_handles++;
	return r->sweep && r->retry && r->gather ? 0 : -1;
}

void sluice_redis__calls_close(sluice_redis_t *r)
{
	sluice_redis__timer_close(r, r->sweep);
	sluice_redis__timer_close(r, r->retry);
	if (r->gather)
		r->loop->ops->hook_close(r->gather, sluice_redis__handle_closed,
					 r);
}

void sluice_redis__batches_drop(sluice_redis_t *r)
{
	sluice_redis_conn_t *k;
	size_t i;

	while ((k = r->batches)) {
		batch_t *b = k->open_batch;

		k->open_batch = NULL;
		batch_unlist(r, k);
		for (i = 0; b && i < b->n; i++) {
			SLUICE_ASSERT(b->calls[i]->refs > 0);
			b->calls[i]->refs--;
			if (!b->calls[i]->done)
				sluice_redis__finish(b->calls[i], SLUICE_ESTORE,
						     NULL);
			else
				call_maybe_free(b->calls[i]);
		}
		free(b);
	}
	if (r->gather)
		r->loop->ops->hook_stop(r->gather);
}

/* Routes the call and puts it on a connection's pipeline. */
void sluice_redis__send(sluice_redis_call_t *c)
{
	sluice_redis_t *r = c->r;
	sluice_redis_node_t *n =
		c->ask ? c->ask : sluice_redis__route(r, c->slot);
	sluice_redis_conn_t *k = sluice_redis__pick(n);
	int rc;

	if (!k && !n->host && !n->path && sluice_redis__sentinel_finding(r) &&
	    clock_ms() < c->deadline_ms) {
		/* No master known yet, the Sentinels still being asked: wait
		 * for their answer within the deadline (the sweep ends the
		 * call past it), as a call waits for a connection being
		 * made.  Failing it at once refused each new worker's first
		 * requests. */
		sluice_redis__retry_later(c);
		return;
	}
	if (!k) {
		/* Down or saturated: fail now rather than queue.  In a
		 * cluster the slot may have a new master (failover): ask. */
		if (!n->host && !n->path)
			c->fail = SLUICE_REDIS_ERR_NO_MASTER;
		else if (sluice_redis__node_saturated(n))
			c->fail = SLUICE_REDIS_ERR_SATURATED;
		sluice_redis__refresh_slots(r);
		sluice_redis__finish(c, SLUICE_ESTORE, NULL);
		return;
	}
	if (batchable(k, c) && batch_add(k, c) == 0)
		return;
	/* The module answers a summary; per-limit decisions of several
	 * limits come from the script's shortfalls. */
	rc = send_on(k, c,
		     k->module != 1 || c->mk || c->peek ||
			     (c->decisions && c->nlimits > 1) ||
			     (c->reserve &&
			      (!k->module_reserve || c->nlimits > 1)) ||
			     (c->refund_if &&
			      (!k->module_refund_if || c->nlimits > 1)));
	if (rc < 0)
		sluice_redis__finish(c, SLUICE_ESTORE, NULL);
}

/* ------------------------------------------------------ timers, retries */

static void on_retry(void *arg)
{
	sluice_redis_t *r = arg;
	sluice_redis_call_t *c = r->retry_head, *next;

	r->retry_head = NULL;
	if (r->refresh_lost)
		sluice_redis__refresh_slots(r);
	for (; c; c = next) {
		next = c->retry_next;
		c->retry_next = NULL;
		c->waiting = 0;
		if (c->done)
			call_maybe_free(c);
		else
			sluice_redis__send(c);
	}
}

void sluice_redis__wake_retry(sluice_redis_t *r)
{
	if (!r->closing && !sluice_redis__timer_active(r, r->retry))
		sluice_redis__timer_start(r, r->retry, SLUICE_REDIS_RETRY_MS,
					  0);
}

void sluice_redis__retry_later(sluice_redis_call_t *c)
{
	sluice_redis_t *r = c->r;

	c->waiting = 1;
	c->retry_next = r->retry_head;
	r->retry_head = c;
	sluice_redis__wake_retry(r);
}

static void arm_sweep(sluice_redis_t *r);

/* Expires every call past its deadline; connections that only time out
 * are dropped afterwards (dropping fails their other calls too, which
 * must not happen while walking the list). */
static void on_sweep(void *arg)
{
	sluice_redis_t *r = arg;
	uint64_t now = clock_ms();
	sluice_redis_call_t *c;
	size_t i;
	unsigned j;
	int drops = 0;

	/* The answers already in the sockets first: after a held loop
	 * this timer runs before the loop polls them, and a call whose
	 * answer is there was answered in time (the caller still gets it
	 * within the timeout of its wait on the loop, which is what the
	 * host allowed).  Only what is still unanswered expires. */
	if (r->head && r->head->deadline_ms <= now) {
		sluice_redis__poll_links(r);
		if (r->closing)
			return;
	}
	while ((c = r->head) && c->deadline_ms <= now) {
		if (c->refs && c->conn)
			c->conn->stuck++;
		sluice_redis__finish(c, SLUICE_ETIMEDOUT, NULL);
	}
	for (i = 0; i < r->nnodes; i++)
		for (j = 0; j < r->nconns; j++) {
			sluice_redis_conn_t *k = &r->nodes[i]->conns[j];

			if (k->link && k->inflight &&
			    k->stuck >= SLUICE_REDIS_STUCK_TIMEOUTS) {
				k->drop = 1;
				drops = 1;
			}
		}
	if (drops)
		for (i = 0; i < r->nnodes; i++)
			for (j = 0; j < r->nconns; j++)
				if (r->nodes[i]->conns[j].drop) {
					sluice_redis__health(
						r->nodes[i], HEALTH_TIMEOUT,
						"calls unanswered; "
						"reconnecting");
					sluice_redis__conn_drop(
						&r->nodes[i]->conns[j]);
				}
	arm_sweep(r);
}

static void arm_sweep(sluice_redis_t *r)
{
	uint64_t now = sluice_redis__now(r);

	/* Armed on the loop's clock, which is at most behind clock_ms(): the
	 * timer fires at or after the deadline, and on_sweep checks it. */
	if (!r->head || r->closing)
		return;
	sluice_redis__timer_start(
		r, r->sweep,
		r->head->deadline_ms > now ? r->head->deadline_ms - now : 0, 0);
}

/* Puts a new call (r, cb/arg or many, slot set) on the pending list and
 * sends it, or fails it fast when its node's breaker is open. */
void sluice_redis__start(sluice_redis_call_t *c)
{
	sluice_redis_t *r = c->r;

	c->deadline_ms = clock_ms() + r->timeout_ms;
	c->start_ns = sluice_redis__hrtime();
	c->guard = sluice_redis__route(r, c->slot);

	/* Pending list, oldest first. */
	c->prev = r->tail;
	if (r->tail)
		r->tail->next = c;
	else
		r->head = c;
	r->tail = c;
	if (!sluice_redis__timer_active(r, r->sweep))
		arm_sweep(r);

	if (!breaker_admit(r, c)) {
		/* In a cluster the slot may have found a new master (a
		 * replica promoted) while its old one's breaker is open. */
		sluice_redis__refresh_slots(r);
		call_fail_fast(c, 0);
		return;
	}
	sluice_redis__send(c);
}

void sluice_redis__retry_now(sluice_redis_t *r)
{
	on_retry(r);
}
