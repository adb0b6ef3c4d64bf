/*
 * sentinel.c -- Redis Sentinel: which server is the master now.
 *
 * The client's one node starts with no address.  The Sentinels are asked
 * in turn (SENTINEL get-master-addr-by-name) until one names the master;
 * the node then connects there, and its handshake checks the answer with
 * ROLE (node.c), since a Sentinel may still name a master that has just
 * been demoted.  Failovers are followed three ways:
 *
 *   - a subscription to +switch-master on one Sentinel, which names the
 *     new master as soon as the Sentinels have promoted it (pinged every
 *     second: one left unanswered for 2 s is dropped, and another
 *     Sentinel is asked and subscribed to);
 *   - a lost connection to the master, or ROLE saying it is no master
 *     (node.c), and a READONLY reply (client.c): each asks again;
 *   - while no Sentinel answers, asking again every RETRY_MS.
 *
 * Until the first Sentinels have answered (a client just opened: a
 * process or an nginx worker just started), calls wait for their answer
 * within their deadline, as a call waits for a connection being made.
 * Once every Sentinel failed to name a master, calls fail at once
 * (SLUICE_ESTORE, counted as "no_master") and the rule's on_store_error
 * applies, as for a Redis that is down; the node's breaker and /readyz
 * behave as for any node.
 */
#include "store/redis/redis_int.h"
#include "util/errmsg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Asking again: not more often than THROTTLE_MS; every RETRY_MS while no
 * Sentinel names a master.  A Sentinel that has not answered within
 * ANSWER_MS (connect, AUTH and the question) is skipped: one that accepts
 * and never answers (hung, or behind a black hole) must not stall the
 * others. */
#define SENTINEL_THROTTLE_MS 100
#define SENTINEL_RETRY_MS    500
#define SENTINEL_ANSWER_MS   1000

typedef struct sentinel_addr_s {
	char *host;
	int port;
	char name[80]; /* "host:port", for the log */
} sentinel_addr_t;

struct sluice_redis_sentinel_state_s {
	sluice_redis_t *r;
	char *master;
	char *user, *password;
	int tls;
	sentinel_addr_t *addrs;
	size_t n;
	size_t next;		    /* the Sentinel to ask next */
	sluice_redis_link_t *query; /* asking one of them now */
	size_t query_ix;
	size_t tried;		  /* Sentinels that failed this round */
	sluice_redis_link_t *sub; /* subscribed to +switch-master */
	size_t sub_ix;
	uint64_t sub_ping_ms;	   /* a PING on it unanswered since (0: none) */
	sluice_loop_timer_t *ping; /* pings the subscription */
	unsigned handles;	   /* timers still to close on free */
	sluice_loop_timer_t *timer; /* asking again later */
	uint64_t asked_ms;	    /* when the last question went out */
	int told_none;		    /* NO_MASTER was reported */
	char why[256];		    /* what the last Sentinel said */
};

typedef struct sluice_redis_sentinel_state_s sentinel_t;

static void ask(sentinel_t *s);

/* ---------------------------------------------------------------- events */

static void tell(sentinel_t *s, sluice_redis_event_kind_t kind,
		 const char *node, const char *detail)
{
	sluice_redis_t *r = s->r;
	sluice_redis_event_t ev;

	if (!r->on_event || r->closing)
		return;
	ev.kind = kind;
	ev.node = node;
	ev.detail = detail;
	r->on_event(r->event_arg, &ev);
}

int sluice_redis__sentinel_finding(const sluice_redis_t *r)
{
	return r->sentinel && !r->sentinel->told_none;
}

/* The master is at host:port: move the node there unless it is already. */
static void found(sentinel_t *s, const char *host, int port, const char *how)
{
	sluice_redis_node_t *n = s->r->nodes[0];
	char addr[300], detail[400];

	s->told_none = 0;
	s->tried = 0;
	if (n->host && n->port == port && strcmp(n->host, host) == 0)
		return;
	if (sluice_redis__node_move(n, host, port) < 0)
		return;
	snprintf(addr, sizeof(addr), "%s:%d", host, port);
	snprintf(detail, sizeof(detail), "master \"%.60s\" is %.100s (%.200s)",
		 s->master, addr, how);
	tell(s, SLUICE_REDIS_EV_MASTER_CHANGED, addr, detail);
}

/* ------------------------------------------------------- +switch-master */

static void on_sub_state(sluice_redis_link_t *l, int status)
{
	sentinel_t *s = l->data;

	if (!s || status == 0 || s->sub != l)
		return;
	/* Subscribed again after the next answer. */
	s->sub = NULL;
	ask(s);
}

/* ["message", "+switch-master", "<name> <old-ip> <old-port> <ip> <port>"] */
static void on_push(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	sentinel_t *s = priv;
	char name[256], oldh[256], newh[256], how[400];
	int oldp, newp;
	const redisReply *m;

	if (!rep || !s || s->sub != l)
		return;
	s->sub_ping_ms = 0; /* it answers: a message, or the PING's "pong" */
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3)
		return;
	m = rep->element[2];
	if (m->type != REDIS_REPLY_STRING || m->len >= 1024 ||
	    sscanf(m->str, "%255s %255s %d %255s %d", name, oldh, &oldp, newh,
		   &newp) != 5 ||
	    strcmp(name, s->master) != 0 || newp <= 0 || newp > 65535)
		return;
	snprintf(how, sizeof(how), "+switch-master from %s",
		 s->addrs[s->sub_ix].name);
	found(s, newh, newp, how);
}

static void subscribe(sentinel_t *s, size_t ix)
{
	sentinel_addr_t *a = &s->addrs[ix];
	sluice_redis_link_t *l = sluice_redis__link_open(
		s->r, a->host, a->port, NULL, s->tls, on_sub_state);

	if (!l)
		return;
	l->data = s;
	s->sub = l;
	s->sub_ix = ix;
	s->sub_ping_ms = 0;
	/* Every reply is a push from here on, AUTH's included (ignored). */
	sluice_redis__link_on_push(l, on_push, s);
	if (s->password && s->user)
		sluice_redis__command(l, NULL, NULL, "AUTH %s %s", s->user,
				      s->password);
	else if (s->password)
		sluice_redis__command(l, NULL, NULL, "AUTH %s", s->password);
	sluice_redis__command(l, NULL, NULL, "SUBSCRIBE +switch-master");
}

/* Every second: a PING on the subscription (allowed in subscribed mode);
 * one unanswered for twice SENTINEL_ANSWER_MS means that Sentinel hangs,
 * and a failover it announces would be missed: drop it, and ask (and
 * subscribe to) the next Sentinel. */
static void on_ping(void *arg)
{
	sentinel_t *s = arg;
	uint64_t now = sluice_redis__now(s->r);
	sluice_redis_link_t *l = s->sub;

	if (!l || s->r->closing)
		return;
	/* An answer a held loop has not read yet is an answer. */
	if (s->sub_ping_ms && sluice_redis__link_poll(l) && s->sub != l)
		return;
	if (!s->sub_ping_ms) {
		if (sluice_redis__command(l, NULL, NULL, "PING") == 0)
			s->sub_ping_ms = now ? now : 1;
		return;
	}
	if (now - s->sub_ping_ms < 2 * SENTINEL_ANSWER_MS)
		return;
	s->sub = NULL;
	l->data = NULL;
	sluice_redis__link_close(l);
	if (s->next == s->sub_ix)
		s->next = (s->sub_ix + 1) % s->n;
	ask(s);
}

/* -------------------------------------------------------------- asking */

static void next_sentinel(sentinel_t *s, const char *why);

static void on_timer(void *arg)
{
	sentinel_t *s = arg;
	sluice_redis_link_t *l = s->query;

	/* A held loop may run this before it polls the socket: a connect
	 * done or an answer waiting there is taken first, and a Sentinel
	 * is judged on the time it had since the link last moved on. */
	if (l) {
		uint64_t since;

		(void)sluice_redis__link_poll(l);
		if (s->query != l)
			return; /* answered, or failed and told */
		since = l->progress_ns
				? (sluice_redis__hrtime() - l->progress_ns) /
					  1000000
				: SENTINEL_ANSWER_MS;
		if (since < SENTINEL_ANSWER_MS) {
			sluice_redis__timer_start(
				s->r, s->timer, SENTINEL_ANSWER_MS - since, 0);
			return;
		}
	}
	if (l) {
		s->query = NULL;
		l->data = NULL;
		sluice_redis__link_close(l);
		next_sentinel(s, "no answer within 1000 ms");
		return;
	}
	ask(s);
}

/* This Sentinel could not name a master: the next one, at once, until
 * all have been tried; then again every SENTINEL_RETRY_MS. */
static void next_sentinel(sentinel_t *s, const char *why)
{
	char detail[512];

	snprintf(s->why, sizeof(s->why), "%s: %s", s->addrs[s->query_ix].name,
		 why);
	s->next = (s->query_ix + 1) % s->n;
	if (++s->tried < s->n) {
		s->asked_ms = 0;
		sluice_redis__timer_start(s->r, s->timer, 0, 0);
		return;
	}
	s->tried = 0;
	if (!s->told_none) {
		s->told_none = 1;
		snprintf(detail, sizeof(detail),
			 "no Sentinel names a master for \"%s\" (last: %s)",
			 s->master, s->why);
		sluice_redis__node_error(s->r->nodes[0], detail);
		tell(s, SLUICE_REDIS_EV_NO_MASTER, s->master, detail);
	}
	sluice_redis__timer_start(s->r, s->timer, SENTINEL_RETRY_MS, 0);
}

static void on_query_state(sluice_redis_link_t *l, int status)
{
	sentinel_t *s = l->data;

	if (!s || status == 0 || s->query != l)
		return;
	s->query = NULL;
	next_sentinel(s, l->errstr[0] ? l->errstr : "connection lost");
}

static void on_auth(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	sentinel_t *s = priv;

	if (rep && rep->type == REDIS_REPLY_ERROR && s->query == l) {
		/* The address query behind it fails too; say why once. */
		snprintf(s->why, sizeof(s->why), "AUTH: %s", rep->str);
	}
}

/* [host, port], or nil when the Sentinel does not know the name. */
static void on_addr(sluice_redis_link_t *l, redisReply *rep, void *priv)
{
	sentinel_t *s = priv;
	char host[256], how[400];
	long port = 0;

	if (!rep || s->query != l)
		return; /* closed: on_query_state or sentinel_free says why */
	sluice_redis__timer_stop(s->r, s->timer);
	s->query = NULL;
	l->data = NULL;
	sluice_redis__link_close(l);
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[1]->type == REDIS_REPLY_STRING &&
	    rep->element[0]->len > 0 && rep->element[0]->len < sizeof(host))
		port = strtol(rep->element[1]->str, NULL, 10);
	if (port <= 0 || port > 65535) {
		next_sentinel(s, rep->type == REDIS_REPLY_ERROR ? rep->str
				 : rep->type == REDIS_REPLY_NIL
					 ? "does not know the master"
					 : "an answer not understood");
		return;
	}
	memcpy(host, rep->element[0]->str, rep->element[0]->len + 1);
	s->next = s->query_ix; /* it answered: ask it first next time */
	if (!s->sub)
		subscribe(s, s->query_ix);
	snprintf(how, sizeof(how), "named by Sentinel %s",
		 s->addrs[s->query_ix].name);
	found(s, host, (int)port, how);
}

static void ask(sentinel_t *s)
{
	sluice_redis_t *r = s->r;
	uint64_t now = sluice_redis__now(r);
	sentinel_addr_t *a;
	sluice_redis_link_t *l;

	if (r->closing || s->query)
		return;
	if (s->asked_ms && now - s->asked_ms < SENTINEL_THROTTLE_MS) {
		if (!sluice_redis__timer_active(r, s->timer))
			sluice_redis__timer_start(
				r, s->timer,
				SENTINEL_THROTTLE_MS - (now - s->asked_ms), 0);
		return;
	}
	sluice_redis__timer_stop(r, s->timer);
	s->asked_ms = now ? now : 1;
	s->query_ix = s->next;
	a = &s->addrs[s->query_ix];
	l = sluice_redis__link_open(r, a->host, a->port, NULL, s->tls,
				    on_query_state);
	if (!l) {
		sluice_redis__timer_start(r, s->timer, SENTINEL_RETRY_MS, 0);
		return;
	}
	l->data = s;
	s->query = l;
	if (s->password && s->user)
		sluice_redis__command(l, on_auth, s, "AUTH %s %s", s->user,
				      s->password);
	else if (s->password)
		sluice_redis__command(l, on_auth, s, "AUTH %s", s->password);
	sluice_redis__command(l, on_addr, s,
			      "SENTINEL get-master-addr-by-name %s", s->master);
	sluice_redis__timer_start(r, s->timer, SENTINEL_ANSWER_MS, 0);
}

void sluice_redis__sentinel_lost(sluice_redis_t *r, const char *why)
{
	(void)why;
	if (r->sentinel)
		ask(r->sentinel);
}

/* on_conn_failed: a connection to the master failed (other than by a
 * refused AUTH, which no failover cures): ask where the master is now. */
static void conn_failed(sluice_redis_t *r, int health, const char *why)
{
	(void)why;
	if (health != HEALTH_AUTH)
		sluice_redis__sentinel_lost(r, why);
}

/* ------------------------------------------------------- new and free */

/* "host:port" -> host and port; 0 or -1. */
static int split_addr(const char *text, char **host, int *port)
{
	const char *colon = strrchr(text, ':');
	char *end;
	long p;

	if (!colon || colon == text)
		return -1;
	p = strtol(colon + 1, &end, 10);
	if (*end || p <= 0 || p > 65535 || end == colon + 1)
		return -1;
	/* "[::1]:26379" */
	if (text[0] == '[' && colon[-1] == ']')
		*host = strndup(text + 1, (size_t)(colon - text - 2));
	else
		*host = strndup(text, (size_t)(colon - text));
	*port = (int)p;
	return *host ? 0 : -1;
}

int sluice_redis__sentinel_check(const sluice_redis_sentinel_t *o, char *err,
				 size_t errlen)
{
	size_t i;
	char *host;
	int port;

	if (!o->master || !*o->master || strpbrk(o->master, " \r\n"))
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis sentinel: a master name is needed "
				   "(the name the Sentinels monitor)");
	if (!o->naddrs || !o->addrs)
		return sluice_fail(SLUICE_EINVAL, err, errlen,
				   "redis sentinel: no Sentinel addresses; "
				   "expected \"host:port\", ...");
	for (i = 0; i < o->naddrs; i++) {
		if (!o->addrs[i] || split_addr(o->addrs[i], &host, &port) < 0)
			return sluice_fail(SLUICE_EINVAL, err, errlen,
					   "redis sentinel \"%s\": expected "
					   "host:port",
					   o->addrs[i] ? o->addrs[i] : "");
		free(host);
	}
	return 0;
}

static void sentinel_destroy(sentinel_t *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		free(s->addrs[i].host);
	free(s->addrs);
	free(s->master);
	free(s->user);
	free(s->password);
	free(s);
}

int sluice_redis__sentinel_start(sluice_redis_t *r,
				 const sluice_redis_sentinel_t *o, char *err,
				 size_t errlen)
{
	sentinel_t *s = calloc(1, sizeof(*s));
	size_t i;
	int bad = !s;

	if (s) {
		s->r = r;
		s->tls = o->tls;
		s->master = strdup(o->master);
		s->user = o->user ? strdup(o->user) : NULL;
		s->password = o->password ? strdup(o->password) : NULL;
		s->addrs = calloc(o->naddrs, sizeof(*s->addrs));
		bad = !s->master || !s->addrs || (o->user && !s->user) ||
		      (o->password && !s->password);
		for (i = 0; !bad && i < o->naddrs; i++) {
			sentinel_addr_t *a = &s->addrs[i];

			bad = split_addr(o->addrs[i], &a->host, &a->port) < 0;
			s->n += !bad;
			if (!bad)
				snprintf(a->name, sizeof(a->name), "%s",
					 o->addrs[i]);
		}
	}
	if (bad) {
		if (s)
			sentinel_destroy(s);
		return sluice_fail(SLUICE_ENOMEM, err, errlen,
				   "redis store: out of memory");
	}
	snprintf(r->nodes[0]->name, sizeof(r->nodes[0]->name), "%s", o->master);
	/* The ping alone must not keep a loop running. */
	s->timer = r->loop->ops->timer_new(
		r->loop, on_timer, s,
		r->flags & SLUICE_REDIS_UNREF ? SLUICE_LOOP_WEAK : 0);
	s->ping =
		r->loop->ops->timer_new(r->loop, on_ping, s, SLUICE_LOOP_WEAK);
	if (!s->timer || !s->ping) {
		if (s->timer)
			r->loop->ops->timer_close(s->timer, NULL, NULL);
		if (s->ping)
			r->loop->ops->timer_close(s->ping, NULL, NULL);
		sentinel_destroy(s);
		return sluice_fail(SLUICE_ENOMEM, err, errlen,
				   "redis store: out of memory");
	}
	s->handles = 2;
	r->open_handles++;
	sluice_redis__timer_start(r, s->ping, 1000, 1000);
	r->sentinel = s;
	r->on_conn_failed = conn_failed;
	ask(s);
	return 0;
}

static void on_timer_closed(void *arg)
{
	sentinel_t *s = arg;
	sluice_redis_t *r = s->r;

	if (--s->handles)
		return;
	sentinel_destroy(s);
	r->released(r);
}

void sluice_redis__sentinel_free(sluice_redis_t *r)
{
	sentinel_t *s = r->sentinel;
	sluice_redis_link_t *l;

	if (!s)
		return;
	r->sentinel = NULL;
	r->on_conn_failed = NULL;
	if ((l = s->query)) {
		s->query = NULL;
		l->data = NULL;
		sluice_redis__link_close(l);
	}
	if ((l = s->sub)) {
		s->sub = NULL;
		l->data = NULL;
		sluice_redis__link_close(l);
	}
	r->loop->ops->timer_close(s->timer, on_timer_closed, s);
	r->loop->ops->timer_close(s->ping, on_timer_closed, s);
}
