/*
 * listen.c -- the gRPC listener of one loop thread: its socket (TCP with
 * SO_REUSEPORT as util/listen_socket.c makes them, or a Unix socket shared by
 * the threads) and accepting on it.
 */
#include "grpc/internal.h"
#include "util/listen_socket.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define UNIX_PREFIX "unix:"

static const char *unix_path(const char *addr)
{
	size_t n = strlen(UNIX_PREFIX);

	return strncmp(addr, UNIX_PREFIX, n) == 0 ? addr + n : NULL;
}

/* 1 when a process accepts on the socket at path. */
static int unix_alive(const struct sockaddr_un *un)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), r;

	if (fd < 0)
		return 1; /* cannot tell: do not remove it */
	r = connect(fd, (const struct sockaddr *)un, sizeof(*un));
	close(fd);
	return r == 0 || errno != ECONNREFUSED;
}

static int unix_socket(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un un;
	struct stat st;
	int fd;

	memset(&un, 0, sizeof(un));
	un.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(un.sun_path)) {
		snprintf(err, errlen, "grpc listen unix:%s: path too long",
			 path);
		return -1;
	}
	memcpy(un.sun_path, path, strlen(path));
	/* A socket left behind by a process that is gone is replaced;
	 * anything else at the path is someone else's. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen,
				 "grpc listen unix:%s: the path exists and is "
				 "not a socket; remove it or choose another",
				 path);
			return -1;
		}
		if (unix_alive(&un)) {
			snprintf(err, errlen,
				 "grpc listen unix:%s: another process "
				 "accepts on this socket",
				 path);
			return -1;
		}
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&un, sizeof(un)) < 0 ||
	    listen(fd, SOMAXCONN) < 0) {
		snprintf(err, errlen, "grpc listen unix:%s: %s", path,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

int sluice_grpc_socket(const char *addr, int first_fd, char *err, size_t errlen)
{
	const char *path = unix_path(addr);
	int fd;

	if (!path)
		return sluice_listen_socket(addr, first_fd < 0, err, errlen);
	if (first_fd < 0)
		return unix_socket(path, err, errlen);
	/* Every thread accepts on the one socket (a Unix socket has no
	 * SO_REUSEPORT balancing); the kernel wakes one or more, and those
	 * that find nothing to accept go back to waiting. */
	fd = fcntl(first_fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		snprintf(err, errlen, "grpc listen %s: %s", addr,
			 strerror(errno));
	return fd;
}

void sluice_grpc_socket_unlink(const char *addr)
{
	const char *path = addr ? unix_path(addr) : NULL;
	struct stat st;

	if (path && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(path);
}

static void on_connection(uv_stream_t *listener, int status)
{
	sluice_grpc_t *g = listener->data;

	if (status < 0)
		return;
	grpc_conn_accept(g);
}

sluice_grpc_t *sluice_grpc_new(uv_loop_t *loop, sluice_svc_t *svc, int fd,
			       const char *addr, char *err, size_t errlen)
{
	sluice_grpc_t *g = calloc(1, sizeof(*g));
	int r;

	if (!g) {
		snprintf(err, errlen, "out of memory");
		close(fd);
		return NULL;
	}
	g->loop = loop;
	g->svc = svc;
	g->is_unix = unix_path(addr) != NULL;
	g->held_budget = SLUICE_HELD_BUDGET;
	if (g->is_unix) {
		uv_pipe_init(loop, &g->listener.pipe, 0);
		r = uv_pipe_open(&g->listener.pipe, fd);
	} else {
		uv_tcp_init(loop, &g->listener.tcp);
		r = uv_tcp_open(&g->listener.tcp, fd);
	}
	if (r < 0)
		close(fd); /* the handle did not take it */
	g->listener.handle.data = g;
	if (r == 0)
		r = uv_listen(&g->listener.stream, SOMAXCONN, on_connection);
	if (r < 0) {
		snprintf(err, errlen, "grpc listen %s: %s", addr,
			 uv_strerror(r));
		/* A handle that took fd closes it now. */
		uv_close(&g->listener.handle, NULL);
		uv_run(loop, UV_RUN_NOWAIT);
		free(g);
		return NULL;
	}
	g->listening = 1;
	grpc_tls_hold(); /* dropped by sluice_grpc_free() */
	return g;
}

static void stop_listening(sluice_grpc_t *g)
{
	if (!g->listening)
		return;
	g->listening = 0;
	uv_close(&g->listener.handle, NULL);
}

void sluice_grpc_sweep(sluice_grpc_t *g, uint64_t force_at_ms)
{
	uint64_t now = uv_now(g->loop);
	grpc_conn_t *c, *next;

	for (c = g->conns; c; c = next) {
		next = c->next;
		if (force_at_ms && now >= force_at_ms) {
			grpc_conn_close(c);
			continue;
		}
		/* max_connection_age: GOAWAY (after a shutdown notice, as
		 * for a drain: calls in flight are answered), and past the
		 * grace the connection closes, open streams or not. */
		if (c->age_ms && !c->closing) {
			/* The grace counts from the GOAWAY, so a late sweep
			 * never closes a connection that was not told. */
			if (c->aged && now - c->aged_ms >= c->age_grace_ms) {
				grpc_conn_close(c);
				continue;
			}
			if (now - c->born_ms >= c->age_ms && !c->aged) {
				c->aged = 1;
				c->aged_ms = now;
				grpc_conn_drain(c);
			}
		}
		grpc_call_sweep(c, now, grpc_conn_idle_timeout_ms(c));
		/* A connection with no stream open and no frame for the idle
		 * timeout: GOAWAY, then it closes. */
		if (!c->closing && !c->goaway && !c->calls &&
		    now - c->touch_ms >= grpc_conn_idle_timeout_ms(c))
			grpc_conn_goaway(c, NGHTTP2_NO_ERROR, "idle");
		if (!c->closing)
			grpc_conn_flush(c);
	}
}

void sluice_grpc_drain(sluice_grpc_t *g)
{
	grpc_conn_t *c, *next;

	g->draining = 1;
	stop_listening(g);
	for (c = g->conns; c; c = next) {
		next = c->next;
		/* Health watches hear NOT_SERVING, then end. */
		grpc_call_update_streams(c);
		grpc_conn_drain(c);
		grpc_conn_flush(c);
	}
}

size_t sluice_grpc_nconns(const sluice_grpc_t *g)
{
	return g ? g->nconns : 0;
}

void sluice_grpc_close_all(sluice_grpc_t *g)
{
	grpc_conn_t *c, *next;

	stop_listening(g);
	for (c = g->conns; c; c = next) {
		next = c->next;
		grpc_conn_close(c);
	}
}

void sluice_grpc_free(sluice_grpc_t *g)
{
	if (g)
		grpc_tls_release(g);
	free(g);
}
