/*
 * test_redis_tls.c -- the Redis store over TLS, against a real redis-server
 * with --tls-port and certificates made here with the openssl command:
 * decisions over rediss:// equal plain ones (one server, both ports, one
 * bucket), a CA that does not match, a host name that does not match, a
 * server that wants a client certificate (mutual TLS), and files that
 * cannot be used.
 */
#include "redis_harness.h"
#include "sluice_redis.h"
#include <unistd.h>

/* ---------------------------------------------------------- certificates */

static char dir[64];

static void sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0) {
		fprintf(stderr, "failed: %s\n", cmd);
		exit(1);
	}
}

/* A CA, a server certificate for localhost and 127.0.0.1, a client
 * certificate, and a second CA that signed none of them. */
static void make_certs(void)
{
	static const char *const key =
		"-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

	strcpy(dir, "/tmp/sluice-tls-XXXXXX");
	CHECK(mkdtemp(dir) != NULL);
	sh("cd %s && printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' "
	   "> san.cnf",
	   dir);
	sh("cd %s && openssl req -x509 %s -keyout ca.key -out ca.crt "
	   "-subj /CN=sluice-test-ca -days 2 2>/dev/null",
	   dir, key);
	sh("cd %s && openssl req -x509 %s -keyout other.key -out other.crt "
	   "-subj /CN=another-ca -days 2 2>/dev/null",
	   dir, key);
	sh("cd %s && openssl req %s -keyout server.key -out server.csr "
	   "-subj /CN=localhost 2>/dev/null && openssl x509 -req -in "
	   "server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
	   "-extfile san.cnf -out server.crt 2>/dev/null",
	   dir, key);
	sh("cd %s && openssl req %s -keyout client.key -out client.csr "
	   "-subj /CN=sluice-client 2>/dev/null && openssl x509 -req -in "
	   "client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
	   "-out client.crt 2>/dev/null",
	   dir, key);
}

static const char *path(const char *name)
{
	static char buf[4][128];
	static int i;

	i = (i + 1) % 4;
	snprintf(buf[i], sizeof(buf[i]), "%s/%s", dir, name);
	return buf[i];
}

/* ------------------------------------------------------------- servers */

typedef struct {
	pid_t pid;
	int port, tls_port;
} tls_redis_t;

/* redis-server with a plain port (to see it is up) and a TLS port;
 * auth_clients: "yes" asks every client for a certificate. */
static pid_t spawn_tls(const int *ports, void *arg)
{
	const char *auth_clients = arg;
	char port[16], tls_port[16];
	char *argv[] = {"redis-server",
			"--port",
			port,
			"--tls-port",
			tls_port,
			"--bind",
			"127.0.0.1",
			"--save",
			"",
			"--appendonly",
			"no",
			"--dir",
			dir,
			"--tls-cert-file",
			(char *)path("server.crt"),
			"--tls-key-file",
			(char *)path("server.key"),
			"--tls-ca-cert-file",
			(char *)path("ca.crt"),
			"--tls-auth-clients",
			(char *)auth_clients,
			NULL};

	snprintf(port, sizeof(port), "%d", ports[0]);
	snprintf(tls_port, sizeof(tls_port), "%d", ports[1]);
	return rh_spawn(argv);
}

static void start(tls_redis_t *s, const char *auth_clients)
{
	int ports[2];

	s->pid = rh_start_on_free_ports(ports, 2, NULL, spawn_tls,
					(void *)auth_clients);
	s->port = ports[0];
	s->tls_port = ports[1];
}

static void stop(tls_redis_t *s)
{
	kill(s->pid, SIGKILL);
	waitpid(s->pid, NULL, 0);
	rh_forget(s->pid);
}

/* -------------------------------------------------------------- clients */

typedef struct {
	unsigned tls_failed, connected, tls_errors;
	char detail[256], node[80];
} seen_t;

static void on_event(void *arg, const sluice_redis_event_t *ev)
{
	seen_t *s = arg;

	if (ev->kind == SLUICE_REDIS_EV_TLS_FAILED) {
		s->tls_failed++;
		snprintf(s->detail, sizeof(s->detail), "%s", ev->detail);
		snprintf(s->node, sizeof(s->node), "%s", ev->node);
	} else if (ev->kind == SLUICE_REDIS_EV_CONNECTED) {
		s->connected++;
	}
}

static void on_report(void *arg, const sluice_redis_node_report_t *rep)
{
	seen_t *s = arg;

	if (rep->error == SLUICE_REDIS_ERR_TLS)
		s->tls_errors++;
}

static sluice_redis_t *client(uv_loop_t *loop, const char *url,
			      const sluice_redis_tls_t *tls, seen_t *seen)
{
	sluice_redis_opts_t o = {0};
	sluice_redis_t *r;
	char err[256];

	o.url = url;
	o.timeout_ms = 2000;
	o.tls = tls;
	o.on_event = on_event;
	o.on_report = on_report;
	o.event_arg = seen;
	CHECK(sluice_redis_open(&r, loop, &o, err, sizeof(err)) == 0);
	return r;
}

/* ---------------------------------------------------------------- tests */

static void test_tls_equals_plain(const tls_redis_t *s)
{
	sluice_redis_tls_t tls = {.ca_file = path("ca.crt")};
	seen_t seen = {0}, seen_plain = {0};
	sluice_redis_t *t, *p;
	char url[64], plain[64];
	sluice_limit_t l;
	uv_loop_t loop;
	int i;

	uv_loop_init(&loop);
	snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", s->tls_port);
	snprintf(plain, sizeof(plain), "redis://127.0.0.1:%d", s->port);
	t = client(&loop, url, &tls, &seen);
	p = client(&loop, plain, NULL, &seen_plain);
	rh_limit(&l, 5, "1/h");
	for (i = 0; i < 7; i++) {
		result_t a = rh_take(&loop, t, "over-tls", &l, 1, 1);
		result_t b = rh_take(&loop, p, "over-plain", &l, 1, 1);

		CHECK(a.status == 0 && b.status == 0);
		CHECK(a.allowed == b.allowed && a.allowed == (i < 5));
		CHECK(a.d.remaining == b.d.remaining && a.d.limit == 5);
		/* The server's clock moved on between the two. */
		CHECK(a.d.retry_after_us + 1000000 >= b.d.retry_after_us &&
		      b.d.retry_after_us + 1000000 >= a.d.retry_after_us);
	}
	/* One bucket whichever way it is reached. */
	for (i = 0; i < 5; i++)
		CHECK(rh_take(&loop, t, "shared", &l, 1, 1).allowed);
	CHECK(!rh_take(&loop, p, "shared", &l, 1, 1).allowed);
	CHECK(!rh_take(&loop, t, "shared", &l, 1, 1).allowed);
	CHECK(sluice_redis_healthy(t));
	CHECK(seen.tls_failed == 0 && seen.connected == 1);
	sluice_redis_free(p);
	rh_close_client(&loop, t);
	uv_loop_close(&loop);
	printf("decisions over rediss:// equal plain ones\n");
}

/* A certificate that does not verify: the call fails (the caller's fail
 * mode applies), the event says why and names the node, once however
 * often the client reconnects, and nothing crashes. */
static void expect_refused(const tls_redis_t *s, const sluice_redis_tls_t *tls,
			   const char *reason)
{
	seen_t seen = {0};
	sluice_redis_t *r;
	sluice_limit_t l;
	uv_loop_t loop;
	char url[64], node[32];
	result_t res;
	int64_t until;

	uv_loop_init(&loop);
	snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", s->tls_port);
	snprintf(node, sizeof(node), "127.0.0.1:%d", s->tls_port);
	r = client(&loop, url, tls, &seen);
	rh_limit(&l, 5, "1/h");
	/* Until it has reconnected several times (the backoff starts at
	 * 10 ms; on a busy machine a handshake alone may take most of a
	 * second), with a generous bound. */
	until = rh_ms() + 30000;
	while (seen.tls_errors < 4 && rh_ms() < until)
		rh_run_for(&loop, 50);
	res = rh_take(&loop, r, "k", &l, 1, 1);
	CHECK(res.status < 0);
	CHECK(!sluice_redis_healthy(r));
	CHECK(seen.connected == 0);
	if (seen.tls_failed != 1)
		fprintf(stderr, "tls_failed %u: %s\n", seen.tls_failed,
			seen.detail);
	CHECK(seen.tls_failed == 1);
	CHECK(seen.tls_errors >= 4); /* each attempt is counted */
	CHECK(strcmp(seen.node, node) == 0);
	if (!strstr(seen.detail, reason)) {
		fprintf(stderr, "detail \"%s\" lacks \"%s\"\n", seen.detail,
			reason);
		CHECK(0);
	}
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
}

static void test_verification(const tls_redis_t *s)
{
	sluice_redis_tls_t wrong_ca = {.ca_file = path("other.crt")};
	sluice_redis_tls_t wrong_name = {.ca_file = path("ca.crt"),
					 .server_name = "redis.example.com"};
	sluice_redis_tls_t right_name = {.ca_file = path("ca.crt"),
					 .server_name = "localhost"};
	sluice_redis_tls_t no_verify = {.ca_file = path("other.crt"),
					.verify = SLUICE_REDIS_TLS_VERIFY_OFF};
	sluice_redis_tls_t wrong_ca_on = {.ca_file = path("other.crt"),
					  .verify = SLUICE_REDIS_TLS_VERIFY_ON};
	seen_t seen = {0};
	sluice_redis_t *r;
	uv_loop_t loop;
	char url[64];

	expect_refused(s, &wrong_ca, "certificate verify failed");
	expect_refused(s, &wrong_ca, "certificate in certificate chain");
	/* verify said outright is the default's verification. */
	expect_refused(s, &wrong_ca_on, "certificate verify failed");
	/* The system's CA store knows nothing of the test CA. */
	expect_refused(s, NULL, "certificate verify failed");
	expect_refused(s, &wrong_name, "certificate verify failed");
	expect_refused(s, &wrong_name, "mismatch");

	uv_loop_init(&loop);
	snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", s->tls_port);
	r = client(&loop, url, &right_name, &seen);
	CHECK(rh_wait_healthy(&loop, r, 5000));
	rh_close_client(&loop, r);
	r = client(&loop, url, &no_verify, &seen);
	CHECK(rh_wait_healthy(&loop, r, 5000));
	rh_close_client(&loop, r);
	/* redis:// with TLS enabled in the options is TLS too. */
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", s->tls_port);
	right_name.enabled = 1;
	r = client(&loop, url, &right_name, &seen);
	CHECK(rh_wait_healthy(&loop, r, 5000));
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	printf("certificates that do not verify are refused, and said why\n");
}

static void test_mutual_tls(const tls_redis_t *s)
{
	sluice_redis_tls_t anon = {.ca_file = path("ca.crt")};
	sluice_redis_tls_t with_cert = {.ca_file = path("ca.crt"),
					.cert_file = path("client.crt"),
					.key_file = path("client.key")};
	seen_t seen = {0};
	sluice_redis_t *r;
	sluice_limit_t l;
	uv_loop_t loop;
	char url[64];

	expect_refused(s, &anon, "TLS");
	uv_loop_init(&loop);
	snprintf(url, sizeof(url), "rediss://127.0.0.1:%d", s->tls_port);
	r = client(&loop, url, &with_cert, &seen);
	rh_limit(&l, 2, "1/h");
	CHECK(rh_take(&loop, r, "m", &l, 1, 1).allowed);
	CHECK(rh_take(&loop, r, "m", &l, 1, 1).allowed);
	CHECK(!rh_take(&loop, r, "m", &l, 1, 1).allowed);
	CHECK(seen.tls_failed == 0);
	rh_close_client(&loop, r);
	uv_loop_close(&loop);
	printf("mutual TLS: refused without a client certificate, works "
	       "with one\n");
}

static void expect_bad(const sluice_redis_tls_t *tls, const char *url,
		       const char *msg)
{
	sluice_redis_opts_t o = {0};

	o.url = url;
	o.tls = tls;
	rh_expect_refused(&o, msg);
}

static void test_bad_files(void)
{
	sluice_redis_tls_t missing = {.ca_file = "/nonexistent/ca.crt"};
	sluice_redis_tls_t not_pem = {.ca_file = "/etc/hostname"};
	sluice_redis_tls_t key_only = {.key_file = path("client.key")};
	sluice_redis_tls_t wrong_key = {.cert_file = path("client.crt"),
					.key_file = path("server.key")};

	expect_bad(&missing, "rediss://127.0.0.1:1", "/nonexistent/ca.crt");
	expect_bad(&not_pem, "rediss://127.0.0.1:1", "ca_file");
	expect_bad(&key_only, "rediss://127.0.0.1:1", "needs a cert_file");
	expect_bad(&wrong_key, "rediss://127.0.0.1:1", "key_file");
	expect_bad(NULL, "rediss://", "no host");
	printf("unusable files and URLs are refused with a message\n");
}

/* The library reads its TLS files itself, the way the config does: a file
 * swapped after the config was checked (a FIFO that would stall the open,
 * another user's copy of the CA) is refused, never waited on or trusted. */
static void test_swapped_files(void)
{
	sluice_redis_tls_t fifo = {.ca_file = path("fifo.crt")};
	sluice_redis_tls_t fifo_key = {.cert_file = path("client.crt"),
				       .key_file = path("fifo.key")};
	sluice_redis_tls_t theirs = {.ca_file = path("theirs.crt")};

	sh("mkfifo %s %s", path("fifo.crt"), path("fifo.key"));
	expect_bad(&fifo, "rediss://127.0.0.1:1", "is a FIFO");
	expect_bad(&fifo_key, "rediss://127.0.0.1:1", "is a FIFO");
	if (geteuid() == 0) {
		sh("cp %s %s && chown 65534 %s", path("ca.crt"),
		   path("theirs.crt"), path("theirs.crt"));
		expect_bad(&theirs, "rediss://127.0.0.1:1",
			   "owned by uid 65534");
	}
	printf("a TLS file swapped for a FIFO or another user's file is "
	       "refused at once\n");
}

int main(void)
{
	tls_redis_t s, mutual;

	atexit(rh_cleanup);
	make_certs();
	test_bad_files();
	test_swapped_files();
	start(&s, "no");
	test_tls_equals_plain(&s);
	test_verification(&s);
	stop(&s);
	start(&mutual, "yes");
	test_mutual_tls(&mutual);
	stop(&mutual);
	sh("rm -rf %s", dir);
	printf("ok\n");
	return 0;
}
