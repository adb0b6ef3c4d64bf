/*
 * test_redis_store_events.c -- a backend's events go where its host said
 * when it opened (store.h: sluice_backend_open_events()), so that several
 * stores in one process -- two Node Limiters, each with its own 'error'
 * events -- each hear only their own Redis; a backend opened without
 * events reports to the process's hooks, as `sluice serve`'s do.  Three
 * real redis-servers, one per backend; the store is called through `ops`
 * only.
 */
#include "redis_harness.h"
#include "store/store.h"

#include <uv.h>

#define WAIT_MS 30000

/* What one listener heard: events by kind, and any naming another node. */
typedef struct heard_s {
	char node[64]; /* the one node it may hear of */
	int events, connected, unreachable, strangers;
	int attached, detached;
} heard_t;

static void on_event(void *arg, const sluice_redis_event_t *ev)
{
	heard_t *h = arg;

	h->events++;
	if (strcmp(ev->node, h->node) != 0) {
		fprintf(stderr, "heard of %s, expected only %s (%s)\n",
			ev->node, h->node, sluice_redis_event_name(ev->kind));
		h->strangers++;
	}
	if (ev->kind == SLUICE_REDIS_EV_CONNECTED)
		h->connected++;
	if (ev->kind == SLUICE_REDIS_EV_UNREACHABLE)
		h->unreachable++;
}

/* The process's hooks: what `sluice serve` sets (store_events.c). */
static heard_t process;

static void hook_event(void *arg, const sluice_redis_event_t *ev)
{
	CHECK(arg == &process);
	on_event(&process, ev);
}

static void *hook_attach(void)
{
	process.attached++;
	return &process;
}

static void hook_detach(void *arg)
{
	CHECK(arg == &process);
	process.detached++;
}

static const sluice_store_hooks_t hooks = {
	.on_event = hook_event,
	.attach = hook_attach,
	.detach = hook_detach,
};

typedef struct answer_s {
	int calls, status, allowed;
} answer_t;

static void on_answer(void *arg, int status, int allowed)
{
	answer_t *a = arg;

	a->calls++;
	a->status = status;
	a->allowed = allowed;
}

static void open_on(sluice_backend_t *be, uv_loop_t *loop, int port,
		    char url[64], const sluice_store_events_t *events)
{
	sluice_store_config_t cfg;
	char err[256];

	memset(&cfg, 0, sizeof(cfg));
	cfg.kind = SLUICE_STORE_REDIS;
	snprintf(url, 64, "redis://127.0.0.1:%d", port);
	cfg.url = url;
	cfg.timeout_ms = 5000; /* a busy machine: no timeouts */
	if (events)
		CHECK(sluice_backend_open_events(be, &cfg, loop, NULL, NULL,
						 events, err,
						 sizeof(err)) == 0);
	else
		CHECK(sluice_backend_open(be, &cfg, loop, NULL, NULL, err,
					  sizeof(err)) == 0);
	CHECK(strcmp(be->ops->name, "redis") == 0);
}

/* One take of `key` through ops, answered from the loop. */
static answer_t take(uv_loop_t *loop, sluice_backend_t *be, const char *key,
		     const sluice_limit_t *l)
{
	sluice_take_item_t it;
	answer_t a = {0};
	int64_t until = rh_ms() + WAIT_MS;

	memset(&it, 0, sizeof(it));
	it.key = key;
	it.keylen = strlen(key);
	it.limits = l;
	it.nlimits = 1;
	it.cost = 1;
	CHECK(be->ops->take(be->impl, &it, 1, 0, on_answer, &a) == 0);
	while (!a.calls && rh_ms() < until)
		uv_run(loop, UV_RUN_ONCE);
	CHECK(a.calls == 1 && a.status == 0 && a.allowed == 1);
	CHECK(it.allowed == 1 && it.summary.remaining == 9);
	return a;
}

/* Runs the loop until *count is nonzero (bounded). */
static void wait_for(uv_loop_t *loop, const int *count)
{
	int64_t until = rh_ms() + WAIT_MS;

	while (!*count && rh_ms() < until) {
		uv_run(loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
	CHECK(*count);
}

static void on_closed(void *arg)
{
	(*(int *)arg)++;
}

int main(void)
{
	rh_redis_t sa = {0}, sb = {0}, sc = {0};
	heard_t ha = {0}, hb = {0};
	sluice_store_events_t ea = {.on_event = on_event, .arg = &ha};
	sluice_store_events_t eb = {.on_event = on_event, .arg = &hb};
	sluice_backend_t a, b, c;
	sluice_limit_t l;
	uv_loop_t loop;
	char ua[64], ub[64], uc[64];
	int closed = 0;

	signal(SIGPIPE, SIG_IGN);
	rh_redis_start(&sa, 0, 0);
	rh_redis_start(&sb, 0, 0);
	rh_redis_start(&sc, 0, 0);
	snprintf(ha.node, sizeof(ha.node), "127.0.0.1:%d", sa.port);
	snprintf(hb.node, sizeof(hb.node), "127.0.0.1:%d", sb.port);
	snprintf(process.node, sizeof(process.node), "127.0.0.1:%d", sc.port);
	sluice_store_set_hooks(&hooks);
	CHECK(sluice_limit_parse(&l, "10", "1/h", NULL, 0) == 0);
	uv_loop_init(&loop);

	/* Two backends with events of their own, one with the process's. */
	open_on(&a, &loop, sa.port, ua, &ea);
	open_on(&b, &loop, sb.port, ub, &eb);
	open_on(&c, &loop, sc.port, uc, NULL);
	CHECK(process.attached == 1);

	/* Each decides on its own server, and says so to its own. */
	take(&loop, &a, "k", &l);
	take(&loop, &b, "k", &l);
	take(&loop, &c, "k", &l);
	wait_for(&loop, &ha.connected);
	wait_for(&loop, &hb.connected);
	wait_for(&loop, &process.connected);
	printf("three backends, three servers: each told its own "
	       "'connected'\n");

	/* B goes away: only B's listener hears it. */
	rh_redis_stop(&sb);
	wait_for(&loop, &hb.unreachable);
	rh_run_for(&loop, 200);
	CHECK(ha.unreachable == 0 && process.unreachable == 0);
	CHECK(ha.strangers == 0 && hb.strangers == 0 && process.strangers == 0);
	printf("server B stopped: B's listener alone heard 'unreachable'\n");

	/* Closing: an events backend detaches nothing from the process's
	 * hooks; close_then's done runs once everything is released. */
	sluice_backend_close_then(&a, on_closed, &closed);
	sluice_backend_close_then(&b, on_closed, &closed);
	CHECK(process.detached == 0);
	sluice_backend_close(&c);
	CHECK(process.detached == 1);
	uv_run(&loop, UV_RUN_DEFAULT);
	CHECK(closed == 2);
	CHECK(a.ops == NULL && b.ops == NULL && c.ops == NULL);
	CHECK(uv_loop_close(&loop) == 0);
	printf("closed: the process's hooks detached once, done ran for "
	       "both\n");

	rh_redis_stop(&sa);
	rh_redis_stop(&sc);
	return 0;
}
