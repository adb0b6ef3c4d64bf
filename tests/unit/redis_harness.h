/*
 * redis_harness.h -- real redis-server processes for the Redis store tests:
 * started on free loopback ports, killed when the test ends however it
 * ends (PR_SET_PDEATHSIG in the child, atexit in the parent), plus a small
 * delaying TCP proxy that makes a healthy Redis look slow.
 *
 * PR_SET_PDEATHSIG follows the thread that forked: a server started from
 * a helper thread dies when that thread ends.
 *
 * Header-only (static inline) so each test stays one source file.
 */
#ifndef SLUICE_REDIS_HARNESS_H
#define SLUICE_REDIS_HARNESS_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define RH_MAX_PROCS 16

static pid_t rh_procs[RH_MAX_PROCS];

static inline void rh_forget(pid_t pid)
{
	int i;

	for (i = 0; i < RH_MAX_PROCS; i++)
		if (rh_procs[i] == pid)
			rh_procs[i] = 0;
}

static inline void rh_cleanup(void)
{
	int i;

	for (i = 0; i < RH_MAX_PROCS; i++)
		if (rh_procs[i] > 0) {
			kill(rh_procs[i], SIGKILL);
			waitpid(rh_procs[i], NULL, 0);
			rh_procs[i] = 0;
		}
}

static inline void rh_remember(pid_t pid)
{
	static int registered;
	int i;

	if (!registered) {
		atexit(rh_cleanup);
		registered = 1;
	}
	for (i = 0; i < RH_MAX_PROCS; i++)
		if (!rh_procs[i]) {
			rh_procs[i] = pid;
			return;
		}
	fprintf(stderr, "harness: too many processes\n");
	exit(1);
}

static inline int64_t rh_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void rh_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	nanosleep(&ts, NULL);
}

/* A port nobody listens on right now (the kernel's pick). */
static inline int rh_free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(fd >= 0);
	CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static inline int rh_port_free(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* A cluster node also listens on port + 10000 (its bus): both free, and
 * below the ephemeral range so the kernel hands neither out meanwhile. */
static inline int rh_free_cluster_port(void)
{
	int i;

	srand((unsigned)getpid() ^ (unsigned)rh_ms());
	for (i = 0; i < 1000; i++) {
		int p = 20000 + rand() % 10000;

		if (rh_port_free(p) && rh_port_free(p + 10000))
			return p;
	}
	fprintf(stderr, "harness: no free cluster port\n");
	exit(1);
}

/* A redis-server process. */
typedef struct rh_redis_s {
	pid_t pid;
	int port;
	char dir[64];
	int cluster;
	const char *module; /* a module to --loadmodule, or NULL */
	/* More arguments for redis-server (at most 8), NULL-terminated;
	 * NULL: none. */
	const char *const *extra;
	/* Environment for redis-server ("NAME=value", e.g. an LD_PRELOAD),
	 * NULL-terminated; NULL: the test's own. */
	const char *const *env;
} rh_redis_t;

/* The process id of the server answering on port (its INFO), 0 when none
 * answers, -1 when it answers INFO with an error (renamed away).  A PING
 * alone may be answered by someone else's server that holds the port,
 * while ours fails to bind it and exits. */
static inline long rh_server_pid(int port)
{
	struct timeval tv = {0, 200000};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *rep;
	long pid = 0;

	if (!c || c->err) {
		if (c)
			redisFree(c);
		return 0;
	}
	redisSetTimeout(c, tv);
	rep = redisCommand(c, "INFO server");
	if (rep && rep->type == REDIS_REPLY_STRING) {
		const char *p = strstr(rep->str, "process_id:");

		if (p)
			pid = atol(p + strlen("process_id:"));
	} else if (rep && rep->type == REDIS_REPLY_ERROR) {
		pid = -1;
	}
	if (rep)
		freeReplyObject(rep);
	redisFree(c);
	return pid;
}

/* Runs argv (a server) with its output discarded and env
 * ("NAME=value", NULL-terminated; may be NULL) added to its environment,
 * killed when the test ends; returns its pid. */
static inline pid_t rh_spawn_env(char *const argv[], const char *const *env)
{
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (; env && *env; env++)
			if (putenv((char *)*env) != 0)
				_exit(127);
		if (null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
			_exit(127);
		execvp(argv[0], argv);
		_exit(127);
	}
	rh_remember(pid);
	return pid;
}

static inline pid_t rh_spawn(char *const argv[])
{
	return rh_spawn_env(argv, NULL);
}

/* Waits until our server (pid) answers on port (30 s at most): 1; 0 when
 * it exited first (reaped), as it does when the port was taken between
 * choosing and binding. */
static inline int rh_wait_own(int port, pid_t pid)
{
	int64_t until = rh_ms() + 30000;

	for (;;) {
		long who = rh_server_pid(port);

		if (who == (long)pid)
			return 1;
		/* A server without INFO: ours if ours still runs. */
		if (waitpid(pid, NULL, WNOHANG) == pid) {
			rh_forget(pid);
			return 0;
		}
		if (who == -1)
			return 1;
		CHECK(rh_ms() < until);
		rh_sleep_ms(10);
	}
}

/* Waits until our server (pid) answers on port; it must not exit. */
static inline void rh_wait_ping(int port, pid_t pid)
{
	CHECK(rh_wait_own(port, pid));
}

/* Starts a server listening on n loopback ports chosen free (ports[0]
 * answering INFO), and again on others when it exits before answering,
 * as it does when a port was taken between choosing and binding: the one
 * way a test starts a server of its own.  choose() gives a port (NULL:
 * rh_free_port()); spawn(ports, arg) starts the server on ports[0..n)
 * and returns its pid.  Five attempts; returns the pid, ports filled. */
typedef pid_t rh_spawn_fn(const int *ports, void *arg);

static inline pid_t rh_start_on_free_ports(int *ports, int n,
					   int (*choose)(void),
					   rh_spawn_fn *spawn, void *arg)
{
	int attempt, i, j;

	for (attempt = 0; attempt < 5; attempt++) {
		pid_t pid;

		for (i = 0; i < n; i++) {
			do {
				ports[i] = choose ? choose() : rh_free_port();
				for (j = 0; j < i && ports[j] != ports[i]; j++)
					;
			} while (j < i);
		}
		pid = spawn(ports, arg);
		if (rh_wait_own(ports[0], pid))
			return pid;
	}
	fprintf(stderr, "harness: no free port after 5 attempts\n");
	exit(1);
}

/* Spawns redis-server for s on ports[0]; its pid. */
static inline pid_t rh_redis_spawn(const int *ports, void *arg)
{
	rh_redis_t *s = arg;
	char portbuf[16];

	s->port = ports[0];

	if (!s->dir[0]) {
		strcpy(s->dir, "/tmp/sluice-redis-XXXXXX");
		CHECK(mkdtemp(s->dir) != NULL);
	}
	snprintf(portbuf, sizeof(portbuf), "%d", s->port);
	{
		char *argv[] = {
			"redis-server", "--port", portbuf, "--bind",
			"127.0.0.1",	"--save", "",	   "--appendonly",
			"no",		"--dir",  s->dir,  NULL,
			NULL,		NULL,	  NULL,	   NULL,
			NULL,		NULL,	  NULL,	   NULL,
			NULL,		NULL,	  NULL,	   NULL};
		int n = 11, i;

		if (s->cluster) {
			argv[n++] = "--cluster-enabled";
			argv[n++] = "yes";
			argv[n++] = "--cluster-config-file";
			argv[n++] = "nodes.conf";
			argv[n++] = "--cluster-node-timeout";
			argv[n++] = "5000";
		} else if (s->module) {
			argv[n++] = "--loadmodule";
			argv[n++] = (char *)s->module;
		}
		for (i = 0; s->extra && s->extra[i] && i < 8; i++)
			argv[n++] = (char *)s->extra[i];
		return rh_spawn_env(argv, s->env);
	}
}

/* Starts redis-server on port (0: one chosen free, and another when it is
 * taken meanwhile) and waits until it answers.  cluster:
 * --cluster-enabled yes with its own config file. */
static inline void rh_redis_start(rh_redis_t *s, int port, int cluster)
{
	s->cluster = cluster;
	if (port) {
		s->pid = rh_redis_spawn(&port, s);
		rh_wait_ping(port, s->pid);
		return;
	}
	s->pid = rh_start_on_free_ports(&s->port, 1,
					cluster ? rh_free_cluster_port : NULL,
					rh_redis_spawn, s);
}

static inline void rh_redis_kill(rh_redis_t *s, int sig)
{
	if (s->pid > 0) {
		kill(s->pid, sig);
		waitpid(s->pid, NULL, 0);
		rh_forget(s->pid);
		s->pid = 0;
	}
}

/* Stops the server and removes its directory. */
static inline void rh_redis_stop(rh_redis_t *s)
{
	char cmd[128];

	rh_redis_kill(s, SIGKILL);
	if (s->dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", s->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "harness: could not remove %s\n",
				s->dir);
		s->dir[0] = '\0';
	}
}

/* A synchronous connection for setting up and inspecting. */
static inline redisContext *rh_connect(int port)
{
	redisContext *c = redisConnect("127.0.0.1", port);

	CHECK(c && !c->err);
	return c;
}

/* Runs a command that must not fail; returns the reply (caller frees). */
static inline redisReply *rh_cmd(redisContext *c, const char *fmt, ...)
{
	redisReply *rep;
	va_list ap;

	va_start(ap, fmt);
	rep = redisvCommand(c, fmt, ap);
	va_end(ap);
	if (!rep || rep->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "harness: %s: %s\n", fmt,
			rep ? rep->str : c->errstr);
		exit(1);
	}
	return rep;
}

static inline long long rh_info_int(redisContext *c, const char *section,
				    const char *field)
{
	redisReply *rep = rh_cmd(c, "INFO %s", section);
	char *p = strstr(rep->str, field);
	long long v = -1;

	if (p && p[strlen(field)] == ':')
		v = atoll(p + strlen(field) + 1);
	freeReplyObject(rep);
	return v;
}

/* ------------------------------------------------ a delaying TCP proxy */

/* A child process accepting on *port (0: one the kernel picks, written
 * back: no one can take it between choosing and binding) and forwarding
 * to `to_port`, every chunk held back `delay_ms` in each direction: a
 * slow Redis. */
typedef struct rh_pipe_s {
	int from, to, delay_ms;
} rh_pipe_t;

static inline void *rh_pump(void *arg)
{
	rh_pipe_t *p = arg;
	char buf[65536];
	ssize_t n;

	while ((n = read(p->from, buf, sizeof(buf))) > 0) {
		rh_sleep_ms(p->delay_ms);
		if (write(p->to, buf, (size_t)n) != n)
			break;
	}
	shutdown(p->to, SHUT_WR);
	return NULL;
}

static inline pid_t rh_proxy_start(int *port, int to_port, int delay_ms)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t alen = sizeof(a);
	int lfd, one = 1;
	pid_t pid;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)*port);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(lfd >= 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(getsockname(lfd, (struct sockaddr *)&a, &alen) == 0);
	*port = ntohs(a.sin_port);
	CHECK(listen(lfd, 64) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (pid > 0) {
		close(lfd);
		rh_remember(pid);
		return pid;
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (;;) {
		int cfd = accept(lfd, NULL, NULL), ufd;
		struct sockaddr_in u = a;
		rh_pipe_t *p;
		pthread_t t;

		if (cfd < 0)
			continue;
		u.sin_port = htons((uint16_t)to_port);
		ufd = socket(AF_INET, SOCK_STREAM, 0);
		if (ufd < 0 ||
		    connect(ufd, (struct sockaddr *)&u, sizeof(u)) != 0) {
			close(cfd);
			if (ufd >= 0)
				close(ufd);
			continue;
		}
		setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		p = malloc(2 * sizeof(*p));
		p[0] = (rh_pipe_t){cfd, ufd, delay_ms};
		p[1] = (rh_pipe_t){ufd, cfd, delay_ms};
		pthread_create(&t, NULL, rh_pump, &p[0]);
		pthread_detach(t);
		pthread_create(&t, NULL, rh_pump, &p[1]);
		pthread_detach(t);
	}
}

static inline void rh_proc_kill(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	rh_forget(pid);
}

/* ------------------------------------------------ a scripted server */

/* A TCP server on a loopback port that reads RESP commands and answers
 * each with what `answer` returns (written whole; a NULL answer closes
 * the connection), for replies no real Redis gives.  Its threads stop
 * with the test process. */
typedef const char *rh_answer_fn(const redisReply *cmd, size_t *len);

typedef struct rh_fake_s {
	int lfd, port;
	rh_answer_fn *answer;
	volatile int commands; /* commands read */
} rh_fake_t;

typedef struct rh_fake_conn_s {
	rh_fake_t *f;
	int fd;
} rh_fake_conn_t;

static inline void *rh_fake_client(void *arg)
{
	rh_fake_conn_t fc = *(rh_fake_conn_t *)arg;
	redisReader *rd = redisReaderCreate();
	char buf[4096];
	ssize_t n;
	void *cmd;
	int open = 1;

	free(arg);
	while (open && (n = read(fc.fd, buf, sizeof(buf))) > 0) {
		redisReaderFeed(rd, buf, (size_t)n);
		while (open && redisReaderGetReply(rd, &cmd) == REDIS_OK &&
		       cmd) {
			size_t len = 0, off = 0;
			const char *out;

			__sync_fetch_and_add(&fc.f->commands, 1);
			out = fc.f->answer(cmd, &len);
			freeReplyObject(cmd);
			if (!out)
				open = 0;
			while (out && off < len) {
				ssize_t w = write(fc.fd, out + off, len - off);

				if (w <= 0) {
					open = 0;
					break;
				}
				off += (size_t)w;
			}
		}
	}
	redisReaderFree(rd);
	close(fc.fd);
	return NULL;
}

static inline void *rh_fake_accept(void *arg)
{
	rh_fake_t *f = arg;

	for (;;) {
		rh_fake_conn_t *fc = malloc(sizeof(*fc));
		pthread_t t;

		if (!fc)
			return NULL;
		fc->f = f;
		if ((fc->fd = accept(f->lfd, NULL, NULL)) < 0) {
			free(fc);
			continue;
		}
		signal(SIGPIPE, SIG_IGN);
		pthread_create(&t, NULL, rh_fake_client, fc);
		pthread_detach(t);
	}
	return NULL;
}

static inline void rh_fake_start(rh_fake_t *f, rh_answer_fn *answer)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof(a);
	pthread_t t;

	f->answer = answer;
	f->commands = 0;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->lfd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(f->lfd >= 0);
	CHECK(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(getsockname(f->lfd, (struct sockaddr *)&a, &len) == 0);
	CHECK(listen(f->lfd, 16) == 0);
	f->port = ntohs(a.sin_port);
	pthread_create(&t, NULL, rh_fake_accept, f);
	pthread_detach(t);
}

/* The command's name, upper case as sent ("" when it is not a command). */
static inline const char *rh_cmd_name(const redisReply *cmd)
{
	if (cmd->type != REDIS_REPLY_ARRAY || cmd->elements < 1 ||
	    cmd->element[0]->type != REDIS_REPLY_STRING)
		return "";
	return cmd->element[0]->str;
}

/* ------------------------------------------- one asynchronous decision */

#include "sluice_redis.h"

#include <uv.h>

/* What a sluice_redis_cb delivered, for tests that wait on the loop. */
typedef struct result_s {
	int done, status, allowed;
	sluice_decision_t d;
	size_t which;
} result_t;

static inline void on_result(void *arg, int status, int allowed,
			     const sluice_decision_t *d, size_t which)
{
	result_t *res = arg;

	res->done = 1;
	res->status = status;
	res->allowed = allowed;
	if (d)
		res->d = *d;
	res->which = which;
}

/* One decision on the client, waiting on the loop until it is answered. */
static inline result_t rh_take(uv_loop_t *loop, sluice_redis_t *r,
			       const char *key, const sluice_limit_t *l,
			       size_t n, uint64_t cost)
{
	result_t res = {0};

	CHECK(sluice_redis_take(r, key, strlen(key), l, n, cost, on_result,
				&res) == 0);
	while (!res.done)
		uv_run(loop, UV_RUN_ONCE);
	return res;
}

static inline void rh_close_client(uv_loop_t *loop, sluice_redis_t *r)
{
	sluice_redis_free(r);
	uv_run(loop, UV_RUN_DEFAULT);
}

/* sluice_redis_open() refuses o with SLUICE_EINVAL, a message holding
 * msg, and nothing left on a loop. */
static inline void rh_expect_refused(const sluice_redis_opts_t *o,
				     const char *msg)
{
	sluice_redis_t *r = NULL;
	uv_loop_t loop;
	char err[256];

	uv_loop_init(&loop);
	CHECK(sluice_redis_open(&r, &loop, o, err, sizeof(err)) ==
	      SLUICE_EINVAL);
	CHECK(r == NULL);
	if (!strstr(err, msg)) {
		fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, msg);
		CHECK(0);
	}
	CHECK(uv_run(&loop, UV_RUN_NOWAIT) == 0);
	uv_loop_close(&loop);
}

/* A limit of cap tokens at rate ("2/s"). */
static inline void rh_limit(sluice_limit_t *l, uint64_t cap, const char *rate)
{
	CHECK(sluice_limit_parse(l, "1", rate, NULL, 0) == 0);
	CHECK(sluice_limit_init(l, cap, &l->rate, NULL, 0) == 0);
}

/* Runs the loop for ms. */
static inline void rh_run_for(uv_loop_t *loop, int ms)
{
	int64_t until = rh_ms() + ms;

	while (rh_ms() < until) {
		uv_run(loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
}

/* Runs the loop until the client is healthy or ms pass; its health. */
static inline int rh_wait_healthy(uv_loop_t *loop, sluice_redis_t *r, int ms)
{
	int64_t until = rh_ms() + ms;

	while (!sluice_redis_healthy(r) && rh_ms() < until) {
		uv_run(loop, UV_RUN_NOWAIT);
		rh_sleep_ms(5);
	}
	return sluice_redis_healthy(r);
}

/* Starts n cluster-enabled servers (each with the extra arguments in
 * `extra`, may be NULL), makes them one cluster (redis-cli --cluster
 * create) and waits until every node says it is up; seeds[i] gets
 * "127.0.0.1:port" of server i. */
static inline void rh_cluster_create(rh_redis_t *servers, int n,
				     const char *const *extra,
				     char (*seeds)[32])
{
	char *argv[80];
	int i, argc = 0, status;
	int64_t until;
	pid_t pid;

	CHECK(n > 0 && n + 5 <= (int)(sizeof(argv) / sizeof(argv[0])));
	for (i = 0; i < n; i++) {
		servers[i].extra = extra;
		rh_redis_start(&servers[i], 0, 1);
		snprintf(seeds[i], 32, "127.0.0.1:%d", servers[i].port);
	}
	argv[argc++] = "redis-cli";
	argv[argc++] = "--cluster";
	argv[argc++] = "create";
	for (i = 0; i < n; i++)
		argv[argc++] = seeds[i];
	argv[argc++] = "--cluster-yes";
	argv[argc] = NULL;
	fflush(stdout);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		if (null < 0 || dup2(null, 1) < 0)
			_exit(127);
		execvp("redis-cli", argv);
		_exit(127);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Every node must agree the cluster is up. */
	until = rh_ms() + 15000;
	for (i = 0; i < n; i++) {
		for (;;) {
			redisContext *c = rh_connect(servers[i].port);
			redisReply *rep = rh_cmd(c, "CLUSTER INFO");
			int ok = strstr(rep->str, "cluster_state:ok") != NULL;

			freeReplyObject(rep);
			redisFree(c);
			if (ok)
				break;
			CHECK(rh_ms() < until);
			rh_sleep_ms(50);
		}
	}
}

#endif /* SLUICE_REDIS_HARNESS_H */
