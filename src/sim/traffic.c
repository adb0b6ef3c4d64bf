/*
 * traffic.c -- the generated traffic of `sluice simulate`.
 *
 * Each client follows a behaviour with the shape of real API traffic;
 * times are microseconds of simulated time.  Only integer arithmetic and
 * splitmix64 are used, so a seed gives the same trace on every machine.
 *
 *   mobile   the app fires 12 requests within 1.5 s when opened, then
 *            refreshes 3 times a minute while open (1-5 min); it is opened
 *            again 2-15 minutes later.
 *   multi    one user with a web client (a page load fires 25 requests in
 *            2 s, the next page 10-50 s later, a poll every 5 s) and the
 *            mobile app, both sending the same x-user-id from one IP.
 *   nat      a campus behind one IP: logged-in users run the mobile app;
 *            anonymous visitors browse (6 requests per page view, a view
 *            every 15-60 s, sessions of 2-15 min).
 *   abuser   18,000 requests a minute (300/s) in bursts of 10-40 s with
 *            20-90 s pauses.  Every third abuser knows the limiter uses
 *            fixed minutes and starts its bursts 1.5 s before a minute
 *            ends -- the classic boundary attack.
 */
#include "sim/prng.h"
#include "sim/sim.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC INT64_C(1000000)
#define MIN (60 * SEC)

const sluice_sim_route_t sluice_sim_routes[] = {
	{"GET", "/v1/feed"},	{"GET", "/v1/notifications"},
	{"GET", "/v1/profile"}, {"GET", "/v1/messages"},
	{"POST", "/v1/events"}, {"GET", "/v1/search"},
	{"POST", "/v1/login"},	{"GET", "/v1/items"},
};
const size_t sluice_sim_nroutes =
	sizeof(sluice_sim_routes) / sizeof(sluice_sim_routes[0]);

enum {
	R_FEED,
	R_NOTIF,
	R_PROFILE,
	R_MSG,
	R_EVENTS,
	R_SEARCH,
	R_LOGIN,
	R_ITEMS
};

static const char *const AGENT_MOBILE = "ExampleApp/4.2 (iOS 17)";
static const char *const AGENT_WEB =
	"Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0";
static const char *const AGENT_BOT = "python-requests/2.31";

const char *sluice_sim_class_name(sluice_sim_class_t c)
{
	static const char *const names[] = {"mobile", "web+mobile", "nat_user",
					    "nat_anon", "abuser"};

	return c < SLUICE_SIM_NCLASSES ? names[c] : "?";
}

void sluice_sim_params_default(sluice_sim_params_t *p)
{
	p->duration_us = 600 * SEC;
	p->mobile_users = 200;
	p->multi_users = 20;
	p->nat_users = 40;
	p->nat_anon = 30;
	p->abusers = 3;
}

/* ------------------------------------------------------ building traces */

static int parse_addr(const char *ip, struct sockaddr_storage *ss)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		return 0;
	}
	return -1;
}

static int64_t key_index(sluice_sim_trace_t *tr, const char *key)
{
	size_t i;
	char **k;

	/* Traces have hundreds of keys: a linear scan keeps this simple. */
	for (i = 0; i < tr->nkeys; i++)
		if (strcmp(tr->keys[i], key) == 0)
			return (int64_t)i;
	k = realloc(tr->keys, (tr->nkeys + 1) * sizeof(*k));
	if (!k)
		return -1;
	tr->keys = k;
	k[tr->nkeys] = strdup(key);
	if (!k[tr->nkeys])
		return -1;
	return (int64_t)tr->nkeys++;
}

int64_t sluice_sim_add_client(sluice_sim_trace_t *tr, sluice_sim_class_t cls,
			      const char *user_id, const char *ip)
{
	sluice_sim_client_t *c;
	int64_t key;

	c = realloc(tr->clients, (tr->nclients + 1) * sizeof(*c));
	if (!c)
		return SLUICE_ENOMEM;
	tr->clients = c;
	c += tr->nclients;
	memset(c, 0, sizeof(*c));
	c->cls = cls;
	snprintf(c->user_id, sizeof(c->user_id), "%s", user_id);
	snprintf(c->ip, sizeof(c->ip), "%s", ip);
	if (parse_addr(ip, &c->addr) < 0)
		return SLUICE_EINVAL;
	c->agent = cls == SLUICE_SIM_ABUSER ? AGENT_BOT : AGENT_MOBILE;
	key = key_index(tr, user_id[0] ? user_id : ip);
	if (key < 0)
		return SLUICE_ENOMEM;
	c->key = (uint32_t)key;
	return (int64_t)tr->nclients++;
}

int sluice_sim_add_event(sluice_sim_trace_t *tr, int64_t t_us, uint32_t client,
			 uint32_t route)
{
	if (tr->nevents == tr->cap) {
		size_t n = tr->cap ? tr->cap * 2 : 4096;
		sluice_sim_event_t *e = realloc(tr->events, n * sizeof(*e));

		if (!e)
			return SLUICE_ENOMEM;
		tr->events = e;
		tr->cap = n;
	}
	tr->events[tr->nevents].t_us = t_us;
	tr->events[tr->nevents].client = client;
	tr->events[tr->nevents].route = route;
	tr->nevents++;
	return 0;
}

/* Events are generated client by client, in time order per client, so
 * (time, client, position) is a total order and the sort is reproducible
 * even though qsort is not stable. */
typedef struct {
	sluice_sim_event_t ev;
	size_t pos;
} ordered_t;

static int cmp_ordered(const void *a, const void *b)
{
	const ordered_t *x = a, *y = b;

	if (x->ev.t_us != y->ev.t_us)
		return x->ev.t_us < y->ev.t_us ? -1 : 1;
	if (x->ev.client != y->ev.client)
		return x->ev.client < y->ev.client ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

void sluice_sim_sort(sluice_sim_trace_t *tr)
{
	ordered_t *o = malloc(tr->nevents * sizeof(*o) + 1);
	size_t i;

	if (!o) {
		/* Fall back to an insertion sort: stable, slow, never fails. */
		for (i = 1; i < tr->nevents; i++) {
			sluice_sim_event_t e = tr->events[i];
			size_t j = i;

			while (j > 0 &&
			       (tr->events[j - 1].t_us > e.t_us ||
				(tr->events[j - 1].t_us == e.t_us &&
				 tr->events[j - 1].client > e.client))) {
				tr->events[j] = tr->events[j - 1];
				j--;
			}
			tr->events[j] = e;
		}
		return;
	}
	for (i = 0; i < tr->nevents; i++) {
		o[i].ev = tr->events[i];
		o[i].pos = i;
	}
	qsort(o, tr->nevents, sizeof(*o), cmp_ordered);
	for (i = 0; i < tr->nevents; i++)
		tr->events[i] = o[i].ev;
	free(o);
}

void sluice_sim_trace_free(sluice_sim_trace_t *tr)
{
	size_t i;

	for (i = 0; i < tr->nkeys; i++)
		free(tr->keys[i]);
	free(tr->keys);
	free(tr->clients);
	free(tr->events);
	memset(tr, 0, sizeof(*tr));
}

/* ------------------------------------------------------------ behaviours */

typedef struct {
	sluice_sim_trace_t *tr;
	sluice_prng_t *r;
	int err;
} gen_t;

static void emit(gen_t *g, int64_t t, uint32_t client, uint32_t route)
{
	if (g->err || t < 0 || t >= g->tr->duration_us)
		return;
	g->err = sluice_sim_add_event(g->tr, t, client, route);
}

/* A burst of n requests spread over `within` microseconds from t. */
static void burst(gen_t *g, int64_t t, int64_t within, unsigned n,
		  uint32_t client, const uint32_t *routes, size_t nroutes)
{
	unsigned i;

	for (i = 0; i < n; i++)
		emit(g, t + sluice_prng_range(g->r, 0, within), client,
		     routes[i % nroutes]);
}

static void mobile(gen_t *g, uint32_t client)
{
	static const uint32_t open_routes[] = {R_FEED, R_NOTIF,	 R_PROFILE,
					       R_MSG,  R_EVENTS, R_ITEMS};
	int64_t t = sluice_prng_range(g->r, 0, 10 * MIN);

	while (t < g->tr->duration_us && !g->err) {
		int64_t len = sluice_prng_range(g->r, 1 * MIN, 5 * MIN), s;

		burst(g, t, 1500000, 12, client, open_routes, 6);
		/* Three refreshes a minute, give or take a few seconds. */
		for (s = t + sluice_prng_range(g->r, 17 * SEC, 23 * SEC);
		     s < t + len;
		     s += sluice_prng_range(g->r, 17 * SEC, 23 * SEC))
			emit(g, s, client, R_FEED);
		t += len + sluice_prng_range(g->r, 2 * MIN, 15 * MIN);
	}
}

static void web(gen_t *g, uint32_t client)
{
	static const uint32_t page_routes[] = {R_FEED,	R_PROFILE, R_MSG,
					       R_ITEMS, R_NOTIF,   R_EVENTS};
	int64_t t = sluice_prng_range(g->r, 0, 5 * MIN);

	while (t < g->tr->duration_us && !g->err) {
		int64_t end = t + sluice_prng_range(g->r, 5 * MIN, 20 * MIN);
		int64_t page, poll;

		/* A single-page app: 25 API calls per page, a poll every 5 s.
		 */
		for (page = t; page < end;
		     page += sluice_prng_range(g->r, 10 * SEC, 50 * SEC))
			burst(g, page, 2 * SEC, 25, client, page_routes, 6);
		for (poll = t + 5 * SEC; poll < end; poll += 5 * SEC)
			emit(g, poll, client, R_NOTIF);
		t = end + sluice_prng_range(g->r, 5 * MIN, 30 * MIN);
	}
}

static void browser(gen_t *g, uint32_t client)
{
	static const uint32_t view_routes[] = {R_ITEMS, R_SEARCH, R_FEED};
	int64_t t = sluice_prng_range(g->r, 0, 10 * MIN);

	while (t < g->tr->duration_us && !g->err) {
		int64_t end = t + sluice_prng_range(g->r, 2 * MIN, 15 * MIN);
		int64_t view;

		for (view = t; view < end;
		     view += sluice_prng_range(g->r, 15 * SEC, 60 * SEC))
			burst(g, view, 1 * SEC, 6, client, view_routes, 3);
		t = end + sluice_prng_range(g->r, 5 * MIN, 40 * MIN);
	}
}

static void abuser(gen_t *g, uint32_t client, int boundary, uint32_t route)
{
	int64_t t = sluice_prng_range(g->r, 0, 1 * MIN);

	while (t < g->tr->duration_us && !g->err) {
		int64_t end, s;

		if (boundary) /* start 1.5 s before the next whole minute */
			t = (t / MIN + 1) * MIN - 1500000;
		end = t + sluice_prng_range(g->r, 10 * SEC, 40 * SEC);
		/* 300 requests a second: gaps of 1667..5000 us, mean 3333. */
		for (s = t; s < end && !g->err;
		     s += sluice_prng_range(g->r, 1667, 5000))
			emit(g, s, client, route);
		t = end + sluice_prng_range(g->r, 20 * SEC, 90 * SEC);
	}
}

/* ------------------------------------------------------------ the mix */

static int64_t add(gen_t *g, sluice_sim_class_t cls, const char *uid,
		   const char *ip, const char *agent)
{
	int64_t c;

	if (g->err)
		return -1;
	c = sluice_sim_add_client(g->tr, cls, uid, ip);
	if (c < 0) {
		g->err = (int)c;
		return -1;
	}
	if (agent)
		g->tr->clients[c].agent = agent;
	return c;
}

int sluice_sim_generate(const sluice_sim_params_t *p, uint64_t seed,
			sluice_sim_trace_t *out)
{
	sluice_prng_t r;
	gen_t g = {out, &r, 0};
	char uid[32], ip[48];
	const char *nat_ip = "198.51.100.7";
	unsigned i;
	int64_t c;

	memset(out, 0, sizeof(*out));
	out->duration_us = p->duration_us;
	sluice_prng_seed(&r, seed);

	for (i = 0; i < p->mobile_users; i++) {
		snprintf(uid, sizeof(uid), "m-%05u", i);
		snprintf(ip, sizeof(ip), "100.%u.%u.%u", 64 + (i >> 16) % 64,
			 (i >> 8) & 255, i & 255);
		if ((c = add(&g, SLUICE_SIM_MOBILE, uid, ip, NULL)) >= 0)
			mobile(&g, (uint32_t)c);
	}
	for (i = 0; i < p->multi_users; i++) {
		snprintf(uid, sizeof(uid), "p-%05u", i);
		snprintf(ip, sizeof(ip), "203.0.%u.%u", 113 + i / 250,
			 1 + i % 250);
		if ((c = add(&g, SLUICE_SIM_MULTI, uid, ip, AGENT_WEB)) >= 0)
			web(&g, (uint32_t)c);
		if ((c = add(&g, SLUICE_SIM_MULTI, uid, ip, NULL)) >= 0)
			mobile(&g, (uint32_t)c);
	}
	for (i = 0; i < p->nat_users; i++) {
		snprintf(uid, sizeof(uid), "u-%05u", i);
		if ((c = add(&g, SLUICE_SIM_NAT_USER, uid, nat_ip, NULL)) >= 0)
			mobile(&g, (uint32_t)c);
	}
	for (i = 0; i < p->nat_anon; i++)
		if ((c = add(&g, SLUICE_SIM_NAT_ANON, "", nat_ip, AGENT_WEB)) >=
		    0)
			browser(&g, (uint32_t)c);
	for (i = 0; i < p->abusers; i++) {
		/* Half sign in with a (stolen or free) account, half stay
		 * anonymous on their own address. */
		snprintf(uid, sizeof(uid), "x-%05u", i);
		snprintf(ip, sizeof(ip), "192.0.2.%u", 1 + i % 250);
		c = add(&g, SLUICE_SIM_ABUSER, i % 2 ? "" : uid, ip, NULL);
		if (c >= 0)
			abuser(&g, (uint32_t)c, i % 3 == 2,
			       i % 2 ? R_LOGIN : R_SEARCH);
	}
	if (g.err) {
		sluice_sim_trace_free(out);
		return g.err;
	}
	sluice_sim_sort(out);
	return 0;
}
