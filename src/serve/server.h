/*
 * server.h -- `sluice serve`: loop threads, listeners, signals, reloads.
 *
 * One libuv loop per thread, each with its own listening socket bound to
 * the same address with SO_REUSEPORT (the kernel spreads connections), so
 * threads share nothing but the memory store and the metrics registry.
 * The main thread runs a loop of its own for signals only:
 *
 *   SIGHUP          reload the config file; a bad file is logged and the
 *                   old config kept; bucket state is kept (the store
 *                   outlives configs); connections stay open
 *   SIGTERM/SIGINT  stop accepting, answer what is in progress, close
 *                   idle connections, exit 0 (forced after 10 s:
 *                   DRAIN_MS in tcp.c)
 */
#ifndef SLUICE_SERVE_SERVER_H
#define SLUICE_SERVE_SERVER_H

#include "policy/svc.h"
#include "serve/http_conn.h"
#include "util/listen_socket.h"
#include "util/loop_lag.h"
#include "util/tls_server.h"

#include <stdatomic.h>
#include <uv.h>

/* Answers one connection may have unsent before it parses no further
 * requests: a few socket buffers (tcp.c). */
#define SLUICE_OUT_HIGH (32 * 1024)

typedef struct sluice_serve_opts_s {
	const char *config_path; /* NULL: the built-in classic policy */
	const char *listen;	 /* overrides the file's listen */
	const char *grpc_listen; /* overrides the file's grpc.listen */
	unsigned threads;	 /* overrides the file's threads when > 0 */
} sluice_serve_opts_t;

struct sluice_server_s;

/* A connection on a socket (tcp.c). */
typedef struct sluice_tcp_s {
	sluice_conn_t conn;
	uv_tcp_t handle;
	uv_write_t wreq;
	uv_shutdown_t sreq;
	sluice_buf_t wbuf; /* bytes handed to uv_write */
	size_t held;	   /* bytes of in, out and wbuf counted in w->held */
	struct sluice_worker_s *w;
	struct sluice_tcp_s *prev, *next;
	uint64_t touch_ms; /* last request start or answer */
	/* http.max_connection_age_ms: accepted at born_ms, the answer to a
	 * request that starts age_ms later closes (0: never). */
	uint64_t born_ms, age_ms;
	/* http.tls / admin.tls (util/tls_server.h): tls.ssl NULL for
	 * cleartext; conn.out's answers go out encrypted via tls.cipher. */
	sluice_tls_conn_t tls;
	unsigned writing : 1;
	unsigned reading : 1;
	unsigned lingering : 1; /* our side is shut; draining the peer's */
	unsigned closing : 1;
} sluice_tcp_t;

/* One loop thread. */
typedef struct sluice_worker_s {
	struct sluice_server_s *server;
	unsigned id;
	uv_loop_t loop;
	uv_tcp_t listener;
	uv_timer_t sweep;
	sluice_loop_lag_t lag; /* sluice_event_loop_lag_seconds */
	uv_async_t wakeup;
	uv_thread_t thread;
	int fd; /* the listening socket */
	int listening;
	/* admin.listen's socket (the first worker only) */
	uv_tcp_t admin_listener;
	int admin_listening;
	/* admin.listen is open: the admin endpoints are served on its
	 * socket only, on every worker (copied onto each connection). */
	int admin_apart;
	sluice_svc_t svc;
	struct sluice_grpc_s *grpc; /* the gRPC listener (src/grpc), or NULL */
	_Atomic(sluice_live_t *) next_live; /* handed over by SIGHUP */
	atomic_int drain;		    /* set by SIGTERM */
	uint64_t drain_deadline_ms;
	sluice_tcp_t conns; /* list head (sentinel) */
	size_t nconns;
	/* Request and answer bytes buffered by this loop's connections,
	 * and the bound past which a connection with unsent answers parses
	 * no further (tcp.c). */
	size_t held, held_budget;
	/* Read buffer shared by this loop's conns.  Its size is also what
	 * one connection may have read and not yet parsed (conn.in), so it
	 * is kept small: requests are small. */
	char rbuf[8 * 1024];
} sluice_worker_t;

/* tcp.c */
/* Each loop thread holds the HTTP listeners' TLS contexts while it runs
 * (the last drop frees them). */
void sluice_tcp_tls_hold(void);
void sluice_tcp_tls_drop(void);
void sluice_tcp_on_connection(uv_stream_t *listener, int status);
void sluice_tcp_sweep(sluice_worker_t *w);
void sluice_tcp_drain(sluice_worker_t *w);
void sluice_tcp_close_all(sluice_worker_t *w);

/* Runs the service until SIGTERM; returns the exit status. */
int sluice_serve(const sluice_serve_opts_t *opts);

#endif /* SLUICE_SERVE_SERVER_H */
