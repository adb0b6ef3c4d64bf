/*
 * client.c -- the Redis store's public face: the API's calls (one key,
 * take_many, peek), health, the client's creation and release.  A call's
 * life (deadline, breaker, sending, retries) is call.c's; several keys
 * and the admin verbs are many.c's. */
#include "store/redis/redis_int.h"
#include "util/defaults.h"
#include "util/errmsg.h"
#include "util/invariant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- the API */

/* ---------------------------------------------------- one-key calls */

/* The reply of a one-key call: the script's shortfalls or the module's
 * decision, whichever it was last sent as; d.which becomes the caller's
 * index of the limit (duplicates were dropped). */
static int one_parse(sluice_redis_call_t *c, const redisReply *reply,
		     sluice_redis_outcome_t *out)
{
	sluice_decision_t each[SLUICE_MAX_LIMITS];
	size_t which = 0, j;
	int rc = !c->script ? sluice_redis__parse_reply(reply, c->nlimits,
							&out->allowed, &out->d,
							&which)
		 : sluice_redis__has_quota(c->limits, c->nlimits)
			 ? sluice_redis__quota_decide(
				   c, reply, c->limits, c->nlimits, c->cost,
				   &out->allowed, &out->d, &which,
				   c->decisions ? each : NULL)
			 : sluice_redis__parse_script_reply_each(
				   reply, c->limits, c->nlimits, c->cost,
				   &out->allowed, &out->d, &which,
				   c->decisions ? each : NULL);

	if (rc < 0)
		return rc;
	SLUICE_ASSERT(which < c->nlimits);
	/* Per limit: the script answers each limit's shortfall; the module
	 * is asked only for one limit (call.c sends several to the script
	 * when decisions are wanted), whose decision is the summary. */
	SLUICE_ASSERT(!c->decisions || c->script || c->nlimits == 1);
	for (j = 0; c->decisions && j < c->ncaller; j++) {
		c->decisions[j] = c->script ? each[c->dist[j]] : out->d;
		c->decisions[j].which = j;
	}
	out->d.which = c->orig[which];
	return 0;
}

/* sluice_redis_take() and _peek(): the caller's callback. */
static void one_done(sluice_redis_call_t *c, int status,
		     const sluice_redis_outcome_t *out)
{
	if (out)
		c->cb(c->arg, status, out->allowed, &out->d, out->d.which);
	else
		c->cb(c->arg, status, 0, NULL, 0);
}

/* A take_many of one item: the item's outputs, then the take's callback. */
static void item_done(sluice_redis_call_t *c, int status,
		      const sluice_redis_outcome_t *out)
{
	if (out) {
		c->item->allowed = out->allowed;
		c->item->summary = out->d;
	}
	c->item_cb(c->arg, status, out ? out->allowed : 0);
}

static const sluice_redis_shape_t one_shape = {one_parse, one_done};
static const sluice_redis_shape_t item_shape = {one_parse, item_done};

/* A one-key call (checked) of `shape`; NULL when out of memory. */
static sluice_redis_call_t *one_call(sluice_redis_t *r,
				     const sluice_redis_shape_t *shape,
				     const void *key, size_t keylen,
				     const sluice_limit_t *limits,
				     size_t nlimits, uint64_t cost)
{
	size_t plen = strlen(r->prefix), i, j;
	sluice_redis_call_t *c;

	c = calloc(1,
		   sizeof(*c) + nlimits * sizeof(*limits) + plen + keylen + 3);
	if (!c)
		return NULL;
	c->r = r;
	c->shape = shape;
	c->cost = cost;
	/* The same limit twice is one bucket (one key name): charge it once
	 * and report the caller's first index for it. */
	for (i = 0; i < nlimits; i++) {
		for (j = 0; j < c->nlimits; j++)
			if (sluice_limit_same(&c->limits[j], &limits[i]))
				break;
		if (j == c->nlimits) {
			c->orig[c->nlimits] = (unsigned char)i;
			c->limits[c->nlimits++] = limits[i];
		}
		c->dist[i] = (unsigned char)j;
	}
	c->ncaller = nlimits;
	c->keybase = (char *)(c->limits + nlimits);
	memcpy(c->keybase, r->prefix, plen);
	c->keybase[plen] = '{';
	if (keylen)
		memcpy(c->keybase + plen + 1, key, keylen);
	memcpy(c->keybase + plen + 1 + keylen, "}:", 2);
	c->keybaselen = plen + keylen + 3;
	c->slot = r->cluster ? sluice_redis__key_slot(c->keybase, c->keybaselen)
			     : 0;
	return c;
}

sluice_redis_call_t *sluice_redis__one_call(sluice_redis_t *r,
					    const sluice_redis_shape_t *shape,
					    const void *key, size_t keylen,
					    const sluice_limit_t *limits,
					    size_t nlimits, uint64_t cost)
{
	return one_call(r, shape, key, keylen, limits, nlimits, cost);
}

static int take_or_peek(sluice_redis_t *r, const void *key, size_t keylen,
			const sluice_limit_t *limits, size_t nlimits,
			uint64_t cost, int peek, sluice_decision_t *decisions,
			sluice_redis_cb cb, void *arg)
{
	sluice_redis_call_t *c;
	int rc;

	if (!cb || r->closing)
		return SLUICE_EINVAL;
	if ((rc = sluice_redis__check_item(r, key, keylen, limits, nlimits)))
		return rc;
	if (!(c = one_call(r, &one_shape, key, keylen, limits, nlimits, cost)))
		return SLUICE_ENOMEM;
	c->cb = cb;
	c->arg = arg;
	c->peek = peek;
	c->decisions = decisions;
	sluice_redis__start(c);
	return 0;
}

int sluice_redis_take(sluice_redis_t *r, const void *key, size_t keylen,
		      const sluice_limit_t *limits, size_t nlimits,
		      uint64_t cost, sluice_redis_cb cb, void *arg)
{
	return take_or_peek(r, key, keylen, limits, nlimits, cost, 0, NULL, cb,
			    arg);
}

int sluice_redis_take_decisions(sluice_redis_t *r, const void *key,
				size_t keylen, const sluice_limit_t *limits,
				size_t nlimits, uint64_t cost,
				sluice_decision_t *decisions,
				sluice_redis_cb cb, void *arg)
{
	return take_or_peek(r, key, keylen, limits, nlimits, cost, 0, decisions,
			    cb, arg);
}

int sluice_redis_peek(sluice_redis_t *r, const void *key, size_t keylen,
		      const sluice_limit_t *limits, size_t nlimits,
		      uint64_t cost, sluice_redis_cb cb, void *arg)
{
	return take_or_peek(r, key, keylen, limits, nlimits, cost, 1, NULL, cb,
			    arg);
}

/* One item goes straight to a one-key call (its outputs written at the
 * end); several to many.c. */
int sluice_redis_take_many(sluice_redis_t *r, sluice_take_item_t *items,
			   size_t n, sluice_redis_many_cb cb, void *arg)
{
	sluice_redis_call_t *c;

	if (!cb || n == 0 || !items || r->closing)
		return SLUICE_EINVAL;
	if (n > 1)
		return sluice_redis__take_many(r, items, n, cb, arg);
	if (sluice_redis__check_item(r, items->key, items->keylen,
				     items->limits, items->nlimits) < 0)
		return SLUICE_EINVAL;
	if (!(c = one_call(r, &item_shape, items->key, items->keylen,
			   items->limits, items->nlimits, items->cost)))
		return SLUICE_ENOMEM;
	c->item = items;
	c->item_cb = cb;
	c->arg = arg;
	sluice_redis__start(c);
	return 0;
}

/* The local stores' shape of reset and refund: one item, copied by
 * sluice_redis_reset() / _refund(). */
static sluice_take_item_t one_item(const void *key, size_t keylen,
				   const sluice_limit_t *limits, size_t nlimits,
				   uint64_t cost)
{
	sluice_take_item_t it;

	memset(&it, 0, sizeof(it));
	it.key = key;
	it.keylen = keylen;
	it.limits = limits;
	it.nlimits = nlimits;
	it.cost = cost;
	return it;
}

int sluice_redis_reset_key(sluice_redis_t *r, const void *key, size_t keylen,
			   const sluice_limit_t *limits, size_t nlimits,
			   sluice_redis_many_cb cb, void *arg)
{
	sluice_take_item_t it = one_item(key, keylen, limits, nlimits, 0);

	return sluice_redis_reset(r, &it, 1, cb, arg);
}

int sluice_redis_refund_key(sluice_redis_t *r, const void *key, size_t keylen,
			    const sluice_limit_t *limits, size_t nlimits,
			    uint64_t cost, sluice_redis_many_cb cb, void *arg)
{
	sluice_take_item_t it = one_item(key, keylen, limits, nlimits, cost);

	return sluice_redis_refund(r, &it, 1, cb, arg);
}

int sluice_redis_healthy(const sluice_redis_t *r)
{
	unsigned char ok[256];
	size_t i;

	if (!r->cluster)
		return sluice_redis__node_healthy(r, r->nodes[0]);
	/* Every slot needs a healthy master. */
	for (i = 0; i < r->nnodes && i < sizeof(ok); i++)
		ok[i] = (unsigned char)sluice_redis__node_healthy(r,
								  r->nodes[i]);
	for (i = 0; i < SLUICE_REDIS_NSLOTS; i++) {
		size_t n = (size_t)r->slots[i];

		if (r->slots[i] < 0 ||
		    !(n < sizeof(ok)
			      ? ok[n]
			      : sluice_redis__node_healthy(r, r->nodes[n])))
			return 0;
	}
	return 1;
}

static void on_probe_call(void *arg, int status, int allowed,
			  const sluice_decision_t *d, size_t which)
{
	sluice_redis_node_t *n = arg;

	(void)status;
	(void)allowed;
	(void)d;
	(void)which;
	n->refusal_probing = 0;
}

/* Sends a peek (cost 0, a key of its own routed to n) to a node that
 * refuses calls, unless one is in flight: a success makes it healthy
 * (r->probe_calls, from node.c's probe timer). */
static void probe_calls(sluice_redis_t *r, sluice_redis_node_t *n)
{
	static const sluice_limit_t none = {0};
	sluice_limit_t l = none;
	char key[32];
	unsigned i;
	int len = 0;

	if (n->refusal_probing || r->closing ||
	    sluice_limit_parse(&l, "1", "1/s", NULL, 0) < 0)
		return;
	/* A key of the probe's own whose slot n serves (in a cluster about
	 * one name in as many as there are masters). */
	for (i = 0; i < 1u << 16; i++) {
		int slot;

		len = snprintf(key, sizeof(key), "sluice-probe-%u", i);
		if (!r->cluster)
			break;
		slot = sluice_redis__key_slot(key, (size_t)len);
		if (r->slots[slot] >= 0 && (size_t)r->slots[slot] == n->index)
			break;
	}
	if (i == 1u << 16)
		return;
	n->refusal_probing = 1;
	/* cost 0 peeks: the full bucket it finds is stored nowhere. */
	if (sluice_redis_take(r, key, (size_t)len, &l, 1, 0, on_probe_call, n) <
	    0)
		n->refusal_probing = 0;
}

/* --------------------------------------------------------- new and free */

static void released(sluice_redis_t *r);

static int setup_nodes(sluice_redis_t *r, const sluice_redis_opts_t *o,
		       char *err, size_t errlen)
{
	size_t i;

	if (o->nseeds) {
		if (sluice_redis__cluster_init(r) < 0)
			return SLUICE_ENOMEM;
		r->nodes = calloc(o->nseeds, sizeof(*r->nodes));
		if (!r->nodes)
			return SLUICE_ENOMEM;
		for (i = 0; i < o->nseeds; i++) {
			sluice_redis_url_t u;
			int rc = sluice_redis__parse_url(o->seeds[i], &u, err,
							 errlen);

			if (rc == 0 && !u.host) {
				char shown[160];

				sluice_redis__url_free(&u);
				snprintf(err, errlen,
					 "cluster seed \"%s\": expected "
					 "host:port",
					 sluice_redis_url_mask(o->seeds[i],
							       shown,
							       sizeof(shown)));
				rc = SLUICE_EINVAL;
			}
			if (rc < 0)
				return rc;
			r->tls_nodes |= u.tls;
			if (i == 0 && (u.user || u.pass)) {
				r->url.user = u.user;
				r->url.pass = u.pass;
				u.user = u.pass = NULL;
			}
			r->nodes[r->nnodes] =
				sluice_redis__node_new(r, u.host, u.port, NULL);
			sluice_redis__url_free(&u);
			if (!r->nodes[r->nnodes])
				return SLUICE_ENOMEM;
			r->nnodes++;
		}
		sluice_redis__refresh_slots(r);
		return 0;
	}
	r->nodes = calloc(1, sizeof(*r->nodes));
	if (!r->nodes)
		return SLUICE_ENOMEM;
	/* Under Sentinel the node has no address until one names it. */
	r->nodes[0] =
		o->sentinel ? sluice_redis__node_new(r, NULL, 0, NULL)
			    : sluice_redis__node_new(r, r->url.host,
						     r->url.port, r->url.path);
	if (!r->nodes[0])
		return SLUICE_ENOMEM;
	r->nnodes = 1;
	if (o->sentinel)
		return sluice_redis__sentinel_start(r, o->sentinel, err,
						    errlen);
	return 0;
}

/* TLS to the data nodes when a URL or seed says rediss:// or opts->tls
 * is enabled; the context exists too when only the Sentinels use TLS. */
static int setup_tls(sluice_redis_t *r, const sluice_redis_opts_t *o, char *err,
		     size_t errlen)
{
	const sluice_redis_tls_t *t = o->tls;
	size_t i;

	r->tls_nodes = r->url.tls || (t && t->enabled);
	for (i = 0; i < o->nseeds; i++)
		if (strncmp(o->seeds[i], "rediss://", 9) == 0)
			r->tls_nodes = 1;
	if (!r->tls_nodes && !(o->sentinel && o->sentinel->tls))
		return 0;
	if (t && t->server_name && !(r->tls_name = strdup(t->server_name)))
		return sluice_fail(SLUICE_ENOMEM, err, errlen,
				   "redis store: out of memory");
	r->tls = sluice_redis__tls_context(t, err, errlen);
	if (!r->tls) {
		free(r->tls_name);
		return SLUICE_EINVAL;
	}
	return 0;
}

/* Checks the options before anything is allocated on the loop, so a bad
 * configuration costs the caller nothing to clean up. */
static int check_opts(const sluice_redis_opts_t *o, char *err, size_t errlen)
{
	sluice_redis_url_t u;
	size_t i;
	int rc;

	if (!o->url && !o->nseeds && !o->sentinel) {
		snprintf(err, errlen,
			 "redis store: a url, cluster seeds or Sentinels "
			 "needed");
		return SLUICE_EINVAL;
	}
	if (o->sentinel && o->nseeds) {
		snprintf(err, errlen,
			 "redis store: Sentinel and cluster seeds exclude "
			 "each other");
		return SLUICE_EINVAL;
	}
	if (o->sentinel &&
	    (rc = sluice_redis__sentinel_check(o->sentinel, err, errlen)) < 0)
		return rc;
	if (o->key_prefix && strpbrk(o->key_prefix, "{}")) {
		snprintf(err, errlen,
			 "redis store: key_prefix \"%s\" must not contain '{' "
			 "or '}' (the key's hash tag follows it)",
			 o->key_prefix);
		return SLUICE_EINVAL;
	}
	for (i = 0; i < o->nseeds; i++) {
		rc = sluice_redis__parse_url(o->seeds[i], &u, err, errlen);
		if (rc == 0 && !u.host) {
			char shown[160];

			snprintf(err, errlen,
				 "cluster seed \"%s\": expected host:port",
				 sluice_redis_url_mask(o->seeds[i], shown,
						       sizeof(shown)));
			rc = SLUICE_EINVAL;
		}
		sluice_redis__url_free(&u);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* The client's timers and the gather hook; -1 when out of memory (those
 * made are closed by sluice_redis_free()). */
static int make_handles(sluice_redis_t *r)
{
	if (sluice_redis__calls_init(r) < 0 || sluice_redis__probe_start(r) < 0)
		return -1;
	return 0;
}

/* The url (credentials only, under Sentinel) and the TLS context into r:
 * 0, or an error with why in err, r's url then freed. */
static int read_url(sluice_redis_t *r, const sluice_redis_opts_t *opts,
		    char *err, size_t errlen)
{
	int rc;

	if (!opts->nseeds && opts->url &&
	    (rc = sluice_redis__parse_url(opts->url, &r->url, err, errlen)) < 0)
		return rc;
	if (opts->sentinel && r->url.path) {
		sluice_redis__url_free(&r->url);
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis store: under Sentinel the url gives "
				   "credentials only; expected "
				   "redis[s]://[user:pass@]name[/db]");
	}
	if ((rc = setup_tls(r, opts, err, errlen)) < 0) {
		sluice_redis__url_free(&r->url);
		return rc;
	}
	return 0;
}

/* The rest of the options into r (r->prefix NULL when out of memory), with
 * the defaults for those not given, and the scripts' SHA-1s. */
static void take_opts(sluice_redis_t *r, sluice_loop_t *loop,
		      const sluice_redis_opts_t *opts)
{
	r->loop = loop;
	r->prefix = strdup(opts->key_prefix ? opts->key_prefix
					    : SLUICE_DEFAULT_KEY_PREFIX);
	r->timeout_ms = opts->timeout_ms ? opts->timeout_ms
					 : SLUICE_DEFAULT_STORE_TIMEOUT_MS;
	r->nconns = opts->connections ? opts->connections
				      : SLUICE_DEFAULT_CONNECTIONS;
	r->flags = opts->flags;
	r->on_event = opts->on_event;
	r->on_report = opts->on_report;
	r->event_arg = opts->event_arg;
	memcpy(r->sha, sluice_redis__script_sha, sizeof(r->sha));
	memcpy(r->sha_multi, sluice_redis__script_multi_sha,
	       sizeof(r->sha_multi));
	memcpy(r->sha_refund, sluice_redis__script_refund_sha,
	       sizeof(r->sha_refund));
	memcpy(r->sha_adjust, sluice_redis__script_adjust_sha,
	       sizeof(r->sha_adjust));
	memcpy(r->sha_carry, sluice_redis__script_carry_sha,
	       sizeof(r->sha_carry));
	r->released = released;
	r->probe_calls = probe_calls;
}

static int open_on(sluice_redis_t **out, sluice_loop_t *loop,
		   sluice_loop_t *own_loop, const sluice_redis_opts_t *opts,
		   char *err, size_t errlen)
{
	char scratch[256];
	sluice_redis_t *r;
	int rc;

	if (!err || !errlen) {
		err = scratch;
		errlen = sizeof(scratch);
	}
	err[0] = '\0';
	if (!out)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis store: out is NULL");
	*out = NULL;
	if (!loop || !opts)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis store: %s is NULL",
				   !loop ? "loop" : "opts");
	if ((rc = check_opts(opts, err, errlen)) < 0) {
		sluice_loop_uv_free(own_loop);
		return rc;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		sluice_loop_uv_free(own_loop);
		return sluice_fail(SLUICE_ENOMEM, err, errlen,
				   "redis store: out of memory");
	}
	r->own_loop = own_loop;
	if ((rc = read_url(r, opts, err, errlen)) < 0) {
		sluice_loop_uv_free(own_loop);
		free(r);
		return rc;
	}
	take_opts(r, loop, opts);
	/* The client's own count, released by sluice_redis_free(): the
	 * memory goes with the last of it and the handles. */
	r->open_handles = 1;
	rc = r->prefix && make_handles(r) == 0
		     ? setup_nodes(r, opts, err, errlen)
		     : SLUICE_ENOMEM;
	if (rc < 0) {
		/* The options were checked: only allocation fails here; the
		 * loop frees the rest. */
		snprintf(err, errlen, "redis store: out of memory");
		sluice_redis_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

int sluice_redis_open_loop(sluice_redis_t **out, sluice_loop_t *loop,
			   const sluice_redis_opts_t *opts, char *err,
			   size_t errlen)
{
	return open_on(out, loop, NULL, opts, err, errlen);
}

int sluice_redis_open(sluice_redis_t **out, uv_loop_t *loop,
		      const sluice_redis_opts_t *opts, char *err, size_t errlen)
{
	static sluice_loop_t unused; /* never run: open_on() refuses first */
	sluice_loop_t *l;

	/* The checks of open_on() first, with their messages. */
	if (!out || !loop || !opts)
		return open_on(out, loop ? &unused : NULL, NULL, opts, err,
			       errlen);
	if (!(l = sluice_loop_uv_new(loop))) {
		*out = NULL;
		return sluice_fail(SLUICE_ENOMEM, err && errlen ? err : NULL,
				   errlen, "redis store: out of memory");
	}
	return open_on(out, l, l, opts, err, errlen);
}

/* Frees the client once the loop has closed its last timer and link
 * (r->released, from every file that closes one). */
static void released(sluice_redis_t *r)
{
	void (*done)(void *) = r->on_released;
	void *done_arg = r->on_released_arg;
	size_t i;

	if (--r->open_handles)
		return;
	for (i = 0; i < r->nnodes; i++) {
		free(r->nodes[i]->conns);
		free(r->nodes[i]->host);
		free(r->nodes[i]->path);
		free(r->nodes[i]);
	}
	free(r->nodes);
	free(r->slots);
	free(r->prefix);
	sluice_redis__tls_context_free(r->tls);
	free(r->tls_name);
	sluice_redis__url_free(&r->url);
	sluice_loop_uv_free(r->own_loop);
	free(r);
	if (done)
		done(done_arg);
}

void sluice_redis_free_then(sluice_redis_t *r, void (*done)(void *arg),
			    void *arg)
{
	if (!r)
		return;
	r->on_released = done;
	r->on_released_arg = arg;
	sluice_redis_free(r);
}

void sluice_redis_free(sluice_redis_t *r)
{
	sluice_redis_call_t *c;
	size_t i;

	if (!r)
		return;
	r->closing = 1;
	while ((c = r->head))
		sluice_redis__finish(c, SLUICE_ESTORE, NULL);
	sluice_redis__batches_drop(r);
	sluice_redis__retry_now(r);
	if (r->sentinel)
		sluice_redis__sentinel_free(r);
	for (i = 0; i < r->nnodes; i++)
		if (r->nodes[i])
			sluice_redis__node_free(r->nodes[i]);
	sluice_redis__timer_close(r, r->probe);
	sluice_redis__calls_close(r);
	/* The client's own count (open_on()): with no handle left to close,
	 * the memory goes now. */
	released(r);
}
