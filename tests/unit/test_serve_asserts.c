/*
 * test_serve_asserts.c -- the invariants serve and the verdict engine rely
 * on are checked (SLUICE_ASSERT) in the test build: breaking one aborts
 * instead of going on with a corrupt connection, take or config.  Each case
 * runs in a child process and must die of SIGABRT.
 */
#include "check.h"
#include "fake_store.h"
#include "policy/live.h"
#include "policy/verdict.h"
#include "serve/http_conn.h"
#include "stores.h"

#include <arpa/inet.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* 1 when fn() aborts (in a child, its stderr silenced). */
static int aborts(void (*fn)(void))
{
	int status = 0;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		fn();
		_exit(0);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void ok(void)
{
}

static void wait_twice(void)
{
	static sluice_conn_t c;
	static sluice_svc_t svc;

	sluice_conn_init(&c, &svc, NULL, NULL);
	sluice_conn_wait(&c);
	sluice_conn_wait(&c); /* a second decision pending: never */
}

static void unref_too_often(void)
{
	sluice_live_t live;

	/* No reference left (its last holder let go): one more unref. */
	memset(&live, 0, sizeof(live));
	atomic_init(&live.refs, 0);
	sluice_live_unref(&live);
}

static const char *no_header(void *ctx, const char *name, size_t *len)
{
	(void)ctx;
	(void)name;
	*len = 0;
	return NULL;
}

static deferred_t store;

static void on_verdict(void *arg, const sluice_verdict_t *v)
{
	(void)arg;
	(void)v;
}

static void decide_while_pending(void)
{
	sluice_config_t *cfg = sluice_config_default();
	sluice_backend_t be = {.ops = &deferred_ops, .impl = &store};
	sluice_take_t *t = sluice_take_new();
	struct sockaddr_in peer;
	sluice_request_t req;

	store.store = open_memstore(100);
	memset(&peer, 0, sizeof(peer));
	peer.sin_family = AF_INET;
	peer.sin_addr.s_addr = htonl(0x7f000001);
	memset(&req, 0, sizeof(req));
	req.method = "GET";
	req.method_len = 3;
	req.path = "/";
	req.path_len = 1;
	req.header = no_header;
	req.peer = (const struct sockaddr *)&peer;
	if (!t || sluice_take_match(t, cfg, &req) < 0 || t->nmatches == 0)
		_exit(4);
	sluice_verdict_decide(&be, t, 0, on_verdict, NULL);
	/* The store has not answered: the take is still in flight. */
	sluice_verdict_decide(&be, t, 0, on_verdict, NULL);
}

static void test_the_harness_tells_abort_from_exit(void)
{
	CHECK(!aborts(ok));
}

static void test_a_second_pending_decision_aborts(void)
{
	CHECK(aborts(wait_twice));
}

static void test_a_config_released_too_often_aborts(void)
{
	CHECK(aborts(unref_too_often));
}

static void test_a_take_decided_while_in_flight_aborts(void)
{
	CHECK(aborts(decide_while_pending));
}

int main(void)
{
#ifdef NDEBUG
	fprintf(stderr, "built with NDEBUG: the asserts are off\n");
	return 1;
#endif
	RUN(test_the_harness_tells_abort_from_exit);
	RUN(test_a_second_pending_decision_aborts);
	RUN(test_a_config_released_too_often_aborts);
	RUN(test_a_take_decided_while_in_flight_aborts);
	TESTS_DONE();
}
