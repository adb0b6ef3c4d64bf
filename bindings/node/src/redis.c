/*
 * redis.c -- libsluice's Redis client on Node's own loop
 * (napi_get_uv_event_loop()): takes, peeks and admin calls answer a JS
 * callback from the loop; node events reach the limiter's JS side.
 */
#include "addon.h"
#include "sluice_redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --------------------------------------------------------- Redis store */

/*
 * One Redis client on Node's loop.  While open it holds a strong
 * reference to its JS owner (like an open socket, it is not collected
 * while it may still call back) and keeps the loop alive through its
 * connections; close() releases both, so the process may exit.
 */
typedef struct rcall_s rcall_t;

typedef struct rclient_s {
	sluice_redis_t *r;
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
} rclient_t;

/* One call waiting for its answer, then for its delivery (first in an
 * admin call, which is freed through it).  id names the call's slot on
 * the JS side: no reference or function per call. */
struct rcall_s {
	rclient_t *c;
	uint32_t id;
	rcall_t *next;
	int status;
	int allowed;
	double nums[DECISION_FIELDS];
};

/* An answer in the owner's table: id, status, allowed, then the
 * decision's DECISION_FIELDS numbers. */
#define ANSWER_FIELDS (3 + DECISION_FIELDS)

/* An admin call: its item and the key it names live until it answers. */
typedef struct radmin_s {
	rcall_t call;
	sluice_take_item_t item;
	char key[SLUICE_KEY_MAX];
} radmin_t;

/* The struct lives until both the client is released and the external
 * is collected, whichever comes last. */
static void maybe_free(rclient_t *c)
{
	if (!c->released || c->handles_open)
		return;
	if (c->hook) {
		napi_remove_async_cleanup_hook(c->hook);
		c->hook = NULL;
	}
	if (c->finalized)
		free(c);
}

static void on_released(void *arg)
{
	rclient_t *c = arg;

	c->released = 1;
	maybe_free(c);
}

static void on_handle_closed(uv_handle_t *h)
{
	rclient_t *c = h->data;

	c->handles_open--;
	maybe_free(c);
}

static void deliver(rclient_t *c);

static void on_check(uv_check_t *h)
{
	deliver(h->data);
}

static void on_idle(uv_idle_t *h)
{
	deliver(h->data);
}

/* Frees the answers not delivered (the environment is going away: no
 * JS, and its references go with it). */
static void drop_queue(rclient_t *c)
{
	rcall_t *call;

	while ((call = c->q_head)) {
		c->q_head = call->next;
		free(call);
	}
	c->q_tail = NULL;
}

static void rclient_close(rclient_t *c)
{
	if (c->closed)
		return;
	c->closed = 1;
	/* Pending calls are answered SLUICE_ESTORE from inside this, and
	 * delivered here, through the async context: release that only
	 * afterwards. */
	sluice_redis_free_then(c->r, on_released, c);
	c->r = NULL;
	if (!c->teardown) {
		deliver(c);
		napi_async_destroy(c->env, c->actx);
		napi_delete_reference(c->env, c->owner);
		napi_delete_reference(c->env, c->answers_ref);
		napi_delete_reference(c->env, c->answers_fn);
	}
	drop_queue(c);
	if (c->handles_open) {
		uv_close((uv_handle_t *)&c->check, on_handle_closed);
		uv_close((uv_handle_t *)&c->idle, on_handle_closed);
	}
}

/* The environment is going away with the client open (a worker ends, the
 * process exits): close it; on_released() then lets teardown go on. */
static void on_env_teardown(napi_async_cleanup_hook_handle handle, void *arg)
{
	rclient_t *c = arg;

	c->teardown = 1;
	rclient_close(c);
}

static void free_rclient(napi_env env, void *data, void *hint)
{
	rclient_t *c = data;

	c->finalized = 1;
	if (c->released && !c->handles_open)
		free(c);
}

static int get_string_prop(napi_env env, napi_value obj, const char *name,
			   char **out)
{
	napi_value v;
	napi_valuetype t;
	size_t len;

	*out = NULL;
	if (napi_get_named_property(env, obj, name, &v) != napi_ok ||
	    napi_typeof(env, v, &t) != napi_ok)
		return -1;
	if (t != napi_string)
		return 0;
	if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok)
		return -1;
	*out = malloc(len + 1);
	if (!*out ||
	    napi_get_value_string_utf8(env, v, *out, len + 1, &len) != napi_ok)
		return -1;
	return 0;
}

static unsigned get_uint_prop(napi_env env, napi_value obj, const char *name)
{
	napi_value v;
	uint32_t u = 0;

	if (napi_get_named_property(env, obj, name, &v) == napi_ok)
		napi_get_value_uint32(env, v, &u);
	return u;
}

/* obj[name] into *out when it is an object: 1, 0 when it is not (absent),
 * -1 on a Node-API failure. */
static int get_object_prop(napi_env env, napi_value obj, const char *name,
			   napi_value *out)
{
	napi_valuetype t;

	if (napi_get_named_property(env, obj, name, out) != napi_ok ||
	    napi_typeof(env, *out, &t) != napi_ok)
		return -1;
	return t == napi_object;
}

static void free_strings(char **v, size_t n)
{
	size_t i;

	for (i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

/* obj[name], an array of strings (checked by index.js), copied into *out
 * (NULL and 0 when it is not an array). */
static int get_strings_prop(napi_env env, napi_value obj, const char *name,
			    char ***out, size_t *n)
{
	napi_value arr;
	bool is_array = false;
	uint32_t len = 0, i;

	*out = NULL;
	*n = 0;
	if (napi_get_named_property(env, obj, name, &arr) != napi_ok ||
	    napi_is_array(env, arr, &is_array) != napi_ok)
		return -1;
	if (!is_array)
		return 0;
	if (napi_get_array_length(env, arr, &len) != napi_ok)
		return -1;
	*out = calloc(len ? len : 1, sizeof(**out));
	if (!*out)
		return -1;
	for (i = 0; i < len; i++) {
		napi_value s;
		size_t slen;

		/* Counted as it goes, so a failure frees what was copied. */
		if (napi_get_element(env, arr, i, &s) != napi_ok ||
		    napi_get_value_string_utf8(env, s, NULL, 0, &slen) !=
			    napi_ok ||
		    !((*out)[i] = malloc(slen + 1)))
			return -1;
		(*n)++;
		if (napi_get_value_string_utf8(env, s, (*out)[i], slen + 1,
					       &slen) != napi_ok)
			return -1;
	}
	return 0;
}

/*
 * The client's node events (on the loop's thread, from inside the client,
 * never once it is closing): a failure is kept until the same node
 * answers again, so a take that fails can say why -- a certificate that
 * does not verify reads otherwise as a bare "store error".  The client
 * reports changes only, so this runs once per change, not per call.
 */
static void tell_js(rclient_t *c, const sluice_redis_event_t *ev);

static void on_event(void *arg, const sluice_redis_event_t *ev)
{
	rclient_t *c = arg;

	tell_js(c, ev);

	switch (ev->kind) {
	case SLUICE_REDIS_EV_TLS_FAILED:
	case SLUICE_REDIS_EV_AUTH_FAILED:
	case SLUICE_REDIS_EV_UNREACHABLE:
	case SLUICE_REDIS_EV_TIMEOUT:
	case SLUICE_REDIS_EV_NO_MASTER:
	/* The server's words, redacted by the client as it read them. */
	case SLUICE_REDIS_EV_REFUSED:
		snprintf(c->why, sizeof(c->why), "%.100s: %s%s%.180s", ev->node,
			 sluice_redis_event_name(ev->kind),
			 ev->detail[0] ? ": " : "", ev->detail);
		snprintf(c->why_node, sizeof(c->why_node), "%s", ev->node);
		c->why_kind = (int)ev->kind;
		break;
	case SLUICE_REDIS_EV_CONNECTED:
	case SLUICE_REDIS_EV_BREAKER_CLOSED:
		/* A closing breaker is calls answered again: not a cure for
		 * a node that cannot be reached, only for refusals. */
		if (strcmp(c->why_node, ev->node) == 0 &&
		    (ev->kind == SLUICE_REDIS_EV_CONNECTED ||
		     c->why_kind == SLUICE_REDIS_EV_REFUSED)) {
			c->why[0] = '\0';
			c->why_kind = 0;
		}
		break;
	case SLUICE_REDIS_EV_MASTER_CHANGED:
		/* Sentinel: the one data node moved; what failed before
		 * was about the old master, or about having none. */
		c->why[0] = '\0';
		c->why_kind = 0;
		break;
	default:
		break;
	}
}

/*
 * The limiter's JS side hears of every node state change, as
 * owner._storeEvent(kind, node, detail).  A plain call, not a callback
 * scope: this runs inside the client (maybe inside a take), so no promise
 * job or nextTick may run here; _storeEvent only queues the app's hooks
 * for later (setImmediate).
 */
static void tell_js(rclient_t *c, const sluice_redis_event_t *ev)
{
	napi_env env = c->env;
	napi_handle_scope scope;
	napi_value owner, fn, argv[3];

	if (c->closed || c->teardown || !c->owner)
		return;
	if (napi_open_handle_scope(env, &scope) != napi_ok)
		return;
	if (napi_get_reference_value(env, c->owner, &owner) == napi_ok &&
	    owner &&
	    napi_get_named_property(env, owner, "_storeEvent", &fn) ==
		    napi_ok &&
	    napi_create_string_utf8(env, sluice_redis_event_name(ev->kind),
				    NAPI_AUTO_LENGTH, &argv[0]) == napi_ok &&
	    napi_create_string_utf8(env, ev->node ? ev->node : "",
				    NAPI_AUTO_LENGTH, &argv[1]) == napi_ok &&
	    napi_create_string_utf8(env, ev->detail ? ev->detail : "",
				    NAPI_AUTO_LENGTH, &argv[2]) == napi_ok) {
		napi_valuetype t;

		if (napi_typeof(env, fn, &t) == napi_ok && t == napi_function &&
		    napi_call_function(env, owner, fn, 3, argv, NULL) ==
			    napi_pending_exception) {
			napi_value e;

			if (napi_get_and_clear_last_exception(env, &e) ==
			    napi_ok)
				napi_fatal_exception(env, e);
		}
	}
	napi_close_handle_scope(env, scope);
}

/*
 * The strings redisNew() copies out of its options object.  They live
 * only through sluice_redis_open(), which keeps its own copies of all it
 * needs later (the URL parsed, the prefix, the TLS server name, the
 * Sentinels' names and credentials; the TLS files are read into the
 * OpenSSL context there and then).
 */
typedef struct redis_strings_s {
	char *url, *prefix;
	char **seeds;
	size_t nseeds;
	char *ca_file, *cert_file, *key_file, *server_name;
	char *master, *user, *password;
	char **addrs;
	size_t naddrs;
} redis_strings_t;

static void redis_strings_free(redis_strings_t *st)
{
	free(st->url);
	free(st->prefix);
	free_strings(st->seeds, st->nseeds);
	free(st->ca_file);
	free(st->cert_file);
	free(st->key_file);
	free(st->server_name);
	free(st->master);
	free(st->user);
	free(st->password);
	free_strings(st->addrs, st->naddrs);
}

/* redisNew()'s options into the library's: o->tls and o->sentinel point
 * at tls and sen when the options hold them.  -1 on a Node-API failure
 * (what was copied is in st, for redis_strings_free()). */
static int redis_opts(napi_env env, napi_value v, sluice_redis_opts_t *o,
		      sluice_redis_tls_t *tls, sluice_redis_sentinel_t *sen,
		      redis_strings_t *st)
{
	napi_value t;
	int has;

	if (get_string_prop(env, v, "url", &st->url) < 0 ||
	    get_string_prop(env, v, "keyPrefix", &st->prefix) < 0 ||
	    get_strings_prop(env, v, "seeds", &st->seeds, &st->nseeds) < 0)
		return -1;
	o->url = st->url;
	o->seeds = (const char *const *)st->seeds;
	o->nseeds = st->nseeds;
	o->key_prefix = st->prefix;
	o->timeout_ms = get_uint_prop(env, v, "timeoutMs");
	o->connections = get_uint_prop(env, v, "connections");
	o->flags = get_uint_prop(env, v, "scriptOnly")
			   ? SLUICE_REDIS_SCRIPT_ONLY
			   : 0;
	if (get_uint_prop(env, v, "unref"))
		o->flags |= SLUICE_REDIS_UNREF;

	/* tls: { caFile, certFile, keyFile, serverName, noVerify }; its
	 * presence turns TLS on. */
	if ((has = get_object_prop(env, v, "tls", &t)) < 0)
		return -1;
	if (has) {
		if (get_string_prop(env, t, "caFile", &st->ca_file) < 0 ||
		    get_string_prop(env, t, "certFile", &st->cert_file) < 0 ||
		    get_string_prop(env, t, "keyFile", &st->key_file) < 0 ||
		    get_string_prop(env, t, "serverName", &st->server_name) < 0)
			return -1;
		tls->enabled = 1;
		tls->ca_file = st->ca_file;
		tls->cert_file = st->cert_file;
		tls->key_file = st->key_file;
		tls->server_name = st->server_name;
		tls->verify = get_uint_prop(env, t, "noVerify")
				      ? SLUICE_REDIS_TLS_VERIFY_OFF
				      : SLUICE_REDIS_TLS_VERIFY_ON;
		o->tls = tls;
	}

	/* sentinel: { master, addrs[], user, password, tls } */
	if ((has = get_object_prop(env, v, "sentinel", &t)) < 0)
		return -1;
	if (has) {
		if (get_string_prop(env, t, "master", &st->master) < 0 ||
		    get_string_prop(env, t, "user", &st->user) < 0 ||
		    get_string_prop(env, t, "password", &st->password) < 0 ||
		    get_strings_prop(env, t, "addrs", &st->addrs, &st->naddrs) <
			    0)
			return -1;
		sen->master = st->master;
		sen->addrs = (const char *const *)st->addrs;
		sen->naddrs = st->naddrs;
		sen->user = st->user;
		sen->password = st->password;
		sen->tls = get_uint_prop(env, t, "tls") != 0;
		o->sentinel = sen;
	}
	return 0;
}

/*
 * redisNew(owner, {url, seeds[], keyPrefix, timeoutMs, connections,
 *                  scriptOnly, tls, sentinel}, answers) -> external
 * Values are checked by index.js; the URL, seeds, Sentinel addresses and
 * TLS files by libsluice (an Error with its message).  answers is a
 * Float64Array of ANSWER_FIELDS numbers per answer: the client writes
 * each batch of answers there and calls owner._answers(n).
 */
static napi_value redis_new(napi_env env, napi_callback_info info)
{
	size_t argc = 3;
	napi_value argv[3], ext, name, fn;
	napi_typedarray_type tt;
	size_t alen = 0;
	void *adata = NULL;
	sluice_redis_opts_t o = {0};
	sluice_redis_tls_t tls = {0};
	sluice_redis_sentinel_t sen = {0};
	redis_strings_t st = {0};
	char err[256];
	rclient_t *c = NULL;
	uv_loop_t *loop;
	napi_value ret = NULL;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	CHECK(env, napi_get_typedarray_info(env, argv[2], &tt, &alen, &adata,
					    NULL, NULL));
	if (tt != napi_float64_array || alen < ANSWER_FIELDS) {
		napi_throw_type_error(env, NULL, "answer table");
		return NULL;
	}
	if (redis_opts(env, argv[1], &o, &tls, &sen, &st) < 0)
		goto napi_fail;
	c = calloc(1, sizeof(*c));
	if (!c || napi_get_uv_event_loop(env, &loop) != napi_ok)
		goto napi_fail;
	c->env = env;
	c->answers = adata;
	c->answers_cap = alen / ANSWER_FIELDS;
	o.on_event = on_event;
	o.event_arg = c;
	if (sluice_redis_open(&c->r, loop, &o, err, sizeof(err)) < 0) {
		napi_throw_error(env, "ERR_SLUICE_REDIS", err);
		goto out;
	}
	/* Never fail (they only link the handles into the loop); started
	 * only while answers wait, so they hold the loop no longer. */
	uv_check_init(loop, &c->check);
	uv_idle_init(loop, &c->idle);
	c->check.data = c;
	c->idle.data = c;
	c->handles_open = 2;
	if (napi_create_string_utf8(env, "sluice:redis", NAPI_AUTO_LENGTH,
				    &name) != napi_ok ||
	    napi_async_init(env, argv[0], name, &c->actx) != napi_ok) {
		/* As a close: the handles go first, then the struct. */
		c->teardown = 1;
		c->finalized = 1;
		rclient_close(c);
		c = NULL;
		goto napi_fail;
	}
	if (napi_get_named_property(env, argv[0], "_answers", &fn) != napi_ok ||
	    napi_create_reference(env, argv[0], 1, &c->owner) != napi_ok ||
	    napi_create_reference(env, argv[2], 1, &c->answers_ref) !=
		    napi_ok ||
	    napi_create_reference(env, fn, 1, &c->answers_fn) != napi_ok ||
	    napi_add_async_cleanup_hook(env, on_env_teardown, c, &c->hook) !=
		    napi_ok ||
	    napi_create_external(env, c, free_rclient, NULL, &ext) != napi_ok) {
		/* The struct is freed once released, like a closed one. */
		c->finalized = 1;
		rclient_close(c);
		c = NULL;
		goto napi_fail;
	}
	c = NULL;
	ret = ext;
	goto out;
napi_fail:
	addon_throw_last(env);
out:
	free(c);
	redis_strings_free(&st);
	return ret;
}

/* An answer (from Redis, the client's timeout or breaker, or a close)
 * joins the queue; the first one of a batch starts the check handle,
 * which delivers them once the loop has read all it could this turn, and
 * the idle handle, which keeps the loop from waiting in poll when the
 * answer came outside it (a timer, a call that failed at once). */
static void enqueue(rclient_t *c, rcall_t *call)
{
	if (c->teardown) {
		free(call);
		return;
	}
	call->next = NULL;
	if (c->q_tail)
		c->q_tail->next = call;
	else
		c->q_head = call;
	c->q_tail = call;
	if (!c->closed && !uv_is_active((uv_handle_t *)&c->check)) {
		uv_check_start(&c->check, on_check);
		uv_idle_start(&c->idle, on_idle);
	}
}

static void on_redis(void *arg, int status, int allowed,
		     const sluice_decision_t *summary, size_t which)
{
	rcall_t *call = arg;

	call->status = status;
	call->allowed = status == 0 && allowed;
	if (status == 0)
		addon_decision(summary, which, call->nums);
	else
		memset(call->nums, 0, sizeof(call->nums));
	enqueue(call->c, call);
}

/* Calls owner._answers(n) for the n answers in the table (inside
 * deliver()'s scopes).  An exception thrown by a callback is the app's:
 * it is reported as uncaught, as Node does for I/O, and _answers() is
 * called again to go on from the answer after it (it keeps its place). */
static void call_js(rclient_t *c, napi_value owner, napi_value fn, size_t n)
{
	napi_env env = c->env;
	napi_value argv[1];
	int rounds;

	if (napi_create_uint32(env, (uint32_t)n, &argv[0]) != napi_ok)
		return;
	/* Bounded: each exception is one answer consumed. */
	for (rounds = 0; rounds <= (int)n; rounds++) {
		napi_value e;

		if (napi_call_function(env, owner, fn, 1, argv, NULL) !=
		    napi_pending_exception)
			return;
		if (napi_get_and_clear_last_exception(env, &e) == napi_ok)
			napi_fatal_exception(env, e);
	}
}

/*
 * Delivers the answers waiting, each callback called in turn inside one
 * callback scope; closing it runs the promise jobs and nextTicks they
 * queued, once.  Answers that arrive meanwhile (a callback's new call
 * failing at once) join this batch; those queued by the checkpoint wait
 * for the next turn.
 */
static void stop_handles(rclient_t *c)
{
	if (!c->closed) {
		uv_check_stop(&c->check);
		uv_idle_stop(&c->idle);
	}
}

static void deliver(rclient_t *c)
{
	napi_env env = c->env;
	napi_handle_scope hs;
	napi_callback_scope cs;
	napi_value owner, fn;
	rcall_t *call;

	if (c->flushing || c->teardown)
		return;
	stop_handles(c);
	if (!c->q_head)
		return;
	if (napi_open_handle_scope(env, &hs) != napi_ok)
		return;
	if (napi_get_reference_value(env, c->owner, &owner) != napi_ok ||
	    !owner ||
	    napi_get_reference_value(env, c->answers_fn, &fn) != napi_ok ||
	    !fn ||
	    napi_open_callback_scope(env, owner, c->actx, &cs) != napi_ok) {
		napi_close_handle_scope(env, hs);
		return;
	}
	c->flushing = 1;
	/* The table filled from the queue, then handed over whole; what
	 * joins the queue meanwhile (a callback's new call failing at once)
	 * goes in the next table-full. */
	while (c->q_head) {
		size_t n = 0;

		while ((call = c->q_head) && n < c->answers_cap) {
			double *a = c->answers + n * ANSWER_FIELDS;

			c->q_head = call->next;
			if (!c->q_head)
				c->q_tail = NULL;
			a[0] = (double)call->id;
			a[1] = (double)call->status;
			a[2] = call->allowed;
			memcpy(a + 3, call->nums, sizeof(call->nums));
			free(call);
			n++;
		}
		call_js(c, owner, fn, n);
	}
	/* What joined meanwhile was delivered here: an idle handle left
	 * running would keep the loop from ever waiting. */
	stop_handles(c);
	c->flushing = 0;
	napi_close_callback_scope(env, cs);
	napi_close_handle_scope(env, hs);
}

/*
 * redisTake(client, key, policy, cost, id) -> undefined
 * The answer comes once, from the loop, as the row of the owner's answer
 * table with this id: status (0 or a negative SLUICE_E* code), allowed,
 * limit, remaining, retryAfterMs, resetMs, which.  Throws (and never
 * answers) when the call cannot be made.
 */
static napi_value redis_call(napi_env env, napi_callback_info info, int peek)
{
	size_t argc = 5, keylen;
	napi_value argv[5];
	rclient_t *c;
	policy_t *p;
	uint64_t cost;
	char key[SLUICE_KEY_MAX];
	rcall_t *call;
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_take_args(env, argv, &p, key, &keylen, &cost);
	if (!c)
		return NULL;
	if (c->closed) {
		napi_throw_error(env, "ERR_SLUICE_CLOSED",
				 "the limiter is closed");
		return NULL;
	}
	call = malloc(sizeof(*call));
	if (!call) {
		napi_throw_error(env, "ERR_SLUICE_NOMEM", "out of memory");
		return NULL;
	}
	call->c = c;
	if (napi_get_value_uint32(env, argv[4], &call->id) != napi_ok) {
		free(call);
		return addon_throw_last(env);
	}
	rc = (peek ? sluice_redis_peek : sluice_redis_take)(
		c->r, key, keylen, p->limits, p->nlimits, cost, on_redis, call);
	if (rc < 0) {
		free(call);
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(rc));
		return NULL;
	}
	return NULL;
}

static napi_value redis_take(napi_env env, napi_callback_info info)
{
	return redis_call(env, info, 0);
}

/* redisPeek(client, key, policy, cost, id): as redisTake, charging
 * nothing (the decision a take of cost would get). */
static napi_value redis_peek(napi_env env, napi_callback_info info)
{
	return redis_call(env, info, 1);
}

/* An admin call answered: a row with its status, delivered as takes
 * are. */
static void on_admin(void *arg, int status, int allowed)
{
	radmin_t *a = arg;

	(void)allowed;
	a->call.status = status;
	a->call.allowed = 0;
	memset(a->call.nums, 0, sizeof(a->call.nums));
	enqueue(a->call.c, &a->call);
}

/*
 * redisAdmin(client, key, policy, n, op, id) -> undefined: op as for
 * memoryAdmin (reset, refund n, penalize n, block n ms); the answer's
 * row (its status) comes once, from the loop, as a take's does.  Reset and
 * refund are the calls sluice serve's /v1/reset and /v1/refund make.
 */
static napi_value redis_admin(napi_env env, napi_callback_info info)
{
	size_t argc = 6, keylen;
	napi_value argv[6];
	rclient_t *c;
	policy_t *p;
	uint64_t n;
	int32_t op = -1;
	radmin_t *a;
	int rc;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	a = malloc(sizeof(*a));
	if (!a) {
		napi_throw_error(env, "ERR_SLUICE_NOMEM", "out of memory");
		return NULL;
	}
	c = addon_take_args(env, argv, &p, a->key, &keylen, &n);
	if (!c || napi_get_value_int32(env, argv[4], &op) != napi_ok) {
		free(a);
		return addon_throw_last(env);
	}
	if (c->closed) {
		free(a);
		napi_throw_error(env, "ERR_SLUICE_CLOSED",
				 "the limiter is closed");
		return NULL;
	}
	memset(&a->item, 0, sizeof(a->item));
	a->item.key = a->key;
	a->item.keylen = keylen;
	a->item.limits = p->limits;
	a->item.nlimits = p->nlimits;
	a->item.cost = n;
	a->call.c = c;
	if (napi_get_value_uint32(env, argv[5], &a->call.id) != napi_ok) {
		free(a);
		return addon_throw_last(env);
	}
	switch (op) {
	case ADMIN_RESET:
		rc = sluice_redis_reset(c->r, &a->item, 1, on_admin, a);
		break;
	case ADMIN_REFUND:
		rc = sluice_redis_refund(c->r, &a->item, 1, on_admin, a);
		break;
	case ADMIN_PENALIZE:
		rc = sluice_redis_penalize(c->r, &a->item, 1, on_admin, a);
		break;
	case ADMIN_BLOCK:
		rc = sluice_redis_block(c->r, &a->item, 1, n, on_admin, a);
		break;
	default:
		rc = SLUICE_EINVAL;
	}
	if (rc < 0) {
		free(a);
		napi_throw_error(env, "ERR_SLUICE", sluice_strerror(rc));
		return NULL;
	}
	return NULL;
}

/* redisHealthy(client) -> bool */
static napi_value redis_healthy(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], res;
	rclient_t *c;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_external(env, argv[0]);
	if (!c)
		return addon_throw_last(env);
	CHECK(env,
	      napi_get_boolean(env, !c->closed && sluice_redis_healthy(c->r),
			       &res));
	return res;
}

/* redisLastError(client) -> ["node: kind: reason", kind] of the last
 * failure a node reported and still has, or ["", ""] */
static napi_value redis_last_error(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1], res, why, kind;
	rclient_t *c;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_external(env, argv[0]);
	if (!c)
		return addon_throw_last(env);
	CHECK(env,
	      napi_create_string_utf8(env, c->why, NAPI_AUTO_LENGTH, &why));
	CHECK(env,
	      napi_create_string_utf8(
		      env,
		      c->why[0] && c->why_kind
			      ? sluice_redis_event_name(
					(sluice_redis_event_kind_t)c->why_kind)
			      : "",
		      NAPI_AUTO_LENGTH, &kind));
	CHECK(env, napi_create_array_with_length(env, 2, &res));
	CHECK(env, napi_set_element(env, res, 0, why));
	CHECK(env, napi_set_element(env, res, 1, kind));
	return res;
}

/* redisClose(client): pending calls are answered with an error first.
 * index.js calls it from setImmediate, never from inside a callback. */
static napi_value redis_close(napi_env env, napi_callback_info info)
{
	size_t argc = 1;
	napi_value argv[1];
	rclient_t *c;

	CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
	c = addon_external(env, argv[0]);
	if (!c)
		return addon_throw_last(env);
	rclient_close(c);
	return NULL;
}

const addon_fn_t addon_redis_fns[] = {
	{"redisNew", redis_new},
	{"redisTake", redis_take},
	{"redisPeek", redis_peek},
	{"redisAdmin", redis_admin},
	{"redisHealthy", redis_healthy},
	{"redisClose", redis_close},
	{"redisLastError", redis_last_error},
};
const size_t addon_redis_nfns =
	sizeof(addon_redis_fns) / sizeof(addon_redis_fns[0]);
